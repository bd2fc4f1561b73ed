"""Checkpoint loaders (GGUF, Hugging Face directories) and the spec -> model registry."""
from compute_worker.loaders.registry import load_model, pick_device, pick_dtype

__all__ = ["load_model", "pick_device", "pick_dtype"]
