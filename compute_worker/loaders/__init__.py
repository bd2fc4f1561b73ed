"""Checkpoint loaders (GGUF, Hugging Face directories) and the spec -> model registry
(`registry.load_model`). Nothing is imported here: `model_source` must stay free of torch."""
