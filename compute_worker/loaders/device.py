"""Where a model runs and in which dtype, unless the caller says."""
from __future__ import annotations

import torch

from compute_worker.loaders.dtype_choice import DtypeChoice, choose_dtype, cpu_flags
from compute_worker.loaders.row_probe import bf16_linears_row_invariant


def pick_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: torch.device | str) -> torch.dtype:
    # The loaders' default when a library caller (tests, benchmarks) names no dtype: fp32 on
    # CPU keeps them exact and unchanged. The worker chooses with --dtype (resolve_dtype).
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def resolve_dtype(requested: str, device: torch.device | str) -> DtypeChoice:
    """`--dtype requested` for a model on `device`, with the reason."""
    return choose_dtype(requested, torch.device(device).type, cpu_flags(),
                        lambda: bf16_linears_row_invariant(device))
