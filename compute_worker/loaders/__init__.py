"""Checkpoint loaders (GGUF, Hugging Face directories) and the spec -> model registry."""
from compute_worker.loaders.device import pick_device, pick_dtype
from compute_worker.loaders.registry import load_model

__all__ = ["load_model", "pick_device", "pick_dtype"]
