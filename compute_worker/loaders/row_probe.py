"""Whether this machine's bf16 linears give a row the same bits whatever rows run beside it.

Block-aligned KV (models/kv_blocks.py) makes bf16 answers from restored KV equal a recompute's
only where that holds: attention is then the one place where a prefix's cut shows, and blocks
take it away. It held on every shape tried on an AVX2 CPU (bf16 emulated); a CPU's matrix-unit
kernels are chosen by the number of rows and may not, so `--dtype auto` asks this probe before
it picks bf16 on a CPU. It runs once at start, in a few milliseconds.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

CUTS = ((0, 1), (3, 1), (5, 2), (7, 16), (9, 32), (0, 64), (40, 72))  # (first row, rows)
SHAPES = ((576, 192), (576, 1536), (1536, 576), (2048, 2048))  # (inputs, outputs): small models'


def rows_invariant(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                   cuts=CUTS) -> bool:
    """True when `fn` of every cut of `x`'s rows equals those rows of `fn(x)`, bit for bit."""
    whole = fn(x)
    return all(torch.equal(fn(x[at:at + n]), whole[at:at + n]) for at, n in cuts)


def bf16_linears_row_invariant(device: torch.device | str = "cpu") -> bool:
    """The probe: random bf16 linears of small models' shapes, 112 rows cut seven ways."""
    gen = torch.Generator().manual_seed(0)
    for k, n in SHAPES:
        w = (torch.randn(n, k, generator=gen) * 0.05).to(device, torch.bfloat16)
        x = torch.randn(112, k, generator=gen).to(device, torch.bfloat16)
        if not rows_invariant(lambda rows: F.linear(rows, w), x):
            return False
    return True
