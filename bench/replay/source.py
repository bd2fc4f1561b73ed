"""Where the replayed turns come from: a trace file, or the seeded synthetic generator."""
from __future__ import annotations

from bench.traces import SynthConfig, Turn, load_trace, synthesize

FORMATS = ("auto", "bidaw", "mooncake", "sharegpt", "synthetic")


def load_turns(trace: str | None, fmt: str = "auto", seed: int = 0) -> list[Turn]:
    if fmt == "synthetic":  # no file: the generator with part 1's statistics
        return synthesize(SynthConfig(seed=seed))
    if not trace:
        raise ValueError("--trace is required unless --format synthetic")
    return load_trace(trace, fmt)
