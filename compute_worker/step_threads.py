"""How many intra-op threads a batch step runs on: the rule (pure) and the switch for the head.

A step of a few tokens (decodes, a short prefill chunk) is some 600 small ops: each matmul reads
its weight once for all the step's rows, and the ops between are a few hundred floats. Split
across cores, every op pays OpenMP's fork and barrier, and a barrier waits for the slowest core:
on a VM one whose time the hypervisor took (25% steal seen here). Measured on this 2-core AMD
EPYC VM (SmolLM2-135M, ms per step, one thread vs two): int4 decode at batch 1 16.9 vs 25.6, at
16 92 vs 112; dense float32 48 vs 53 and 174 vs 246; a 32-token int4 prefill 98 vs 87, a 512-token
one 1,146 vs 838. So a step of at most SMALL_STEP_TOKENS runs on `small` threads, a bigger one on
all; the engine runs the output projection, one big matmul, on all threads in every step.
Restored answers still equal recomputed ones with it: the exactness tests run with it on.
The rule is for the layers' torch ops: a q4 model's native forward (one call) splits only
work worth a thread's start, so the engine runs its every step on all threads (engine.py).
"""
from __future__ import annotations

import contextlib

import torch

SMALL_STEP_TOKENS = 16


def step_threads(tokens: int, threads: int, small: int) -> int:
    """Threads for a step of `tokens` new tokens: `small` (0: off) for a small step, else all
    `threads`."""
    return small if small and tokens <= SMALL_STEP_TOKENS else threads


@contextlib.contextmanager
def at_least_threads(n: int):
    """Run the block on `n` intra-op threads if the step runs on fewer, then back (the output
    projection of a small step)."""
    before = torch.get_num_threads()
    if n > before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n > before:
            torch.set_num_threads(before)
