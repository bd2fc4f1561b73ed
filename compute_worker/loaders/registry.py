"""Resolve a model spec ("smollm2-135m", a .gguf file, or an HF directory) to (model, tokenizer)."""
from __future__ import annotations

from pathlib import Path

import torch

from compute_worker.loaders.device import pick_device, pick_dtype
from compute_worker.loaders.gguf_loader import load_gguf
from compute_worker.loaders.hf_loader import load_hf_dir
from compute_worker.models import CausalLM
from compute_worker.tokenizer import ChatTokenizer

DEFAULT_SPEC = "smollm2-135m"


def load_model(spec: str = DEFAULT_SPEC, device: torch.device | str | None = None,
               dtype: torch.dtype | None = None) -> tuple[CausalLM, ChatTokenizer | None]:
    device = device or pick_device()
    dtype = dtype or pick_dtype(device)
    if spec in (DEFAULT_SPEC, "smollm2-135m-instruct", "default", ""):
        return load_gguf(None, device=device, dtype=dtype)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return load_gguf(path, device=device, dtype=dtype)
    if path.is_dir() and (path / "config.json").exists():
        return load_hf_dir(path, device=device, dtype=dtype)
    raise ValueError(f"unknown model spec {spec!r}: expected {DEFAULT_SPEC!r}, a .gguf file or an HF directory")
