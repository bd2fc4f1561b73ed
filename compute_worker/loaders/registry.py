"""Resolve a model spec ("smollm2-135m", a .gguf file, or an HF directory) to (model, tokenizer)."""
from __future__ import annotations

import torch

from compute_worker.loaders.device import pick_device, pick_dtype
from compute_worker.loaders.gguf_loader import load_gguf
from compute_worker.loaders.hf_loader import load_hf_dir
from compute_worker.loaders.model_source import DEFAULT_SPEC, model_source
from compute_worker.models import CausalLM
from compute_worker.tokenizer import ChatTokenizer

def load_model(spec: str = DEFAULT_SPEC, device: torch.device | str | None = None,
               dtype: torch.dtype | None = None) -> tuple[CausalLM, ChatTokenizer | None]:
    device = device or pick_device()
    dtype = dtype or pick_dtype(device)
    path = model_source(spec)
    if path is None or path.is_file():
        return load_gguf(path, device=device, dtype=dtype)
    return load_hf_dir(path, device=device, dtype=dtype)
