"""Where a model runs and in which dtype, unless the caller says."""
from __future__ import annotations

import torch


def pick_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: torch.device | str) -> torch.dtype:
    # bf16 halves memory and KV bytes on GPU; CPU bf16 matmuls are slow on most hosts, keep fp32.
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
