"""The machine's memory read bandwidth, measured the way decode reads weights: one pass over a
tensor far larger than the caches."""
from __future__ import annotations

import time

import torch

from bench.compute.roofline import gbps

REPEAT = 5


def describe(nbytes: int) -> str:
    return f"torch.sum over a float32 tensor of {nbytes / 2**30:g} GiB, best of {REPEAT}"


def memory_read_gbps(nbytes: int = 1 << 30, device: torch.device | str = "cpu",
                     threads: int = 0) -> float:
    """GB/s at which torch.sum reads `nbytes` on `device`, best of REPEAT passes (none
    page-faults: torch.ones has touched every page), on `threads` CPU threads (0: all torch's;
    1: what one core reads, the bound of a decode step run on one thread)."""
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    before, times = torch.get_num_threads(), []
    torch.set_num_threads(threads or before)
    try:
        for _ in range(REPEAT):
            start = time.perf_counter()
            float(x.sum())  # float(): waits for an accelerator too
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return gbps(x.nbytes, min(times))
