"""How far off the entries DRAM evicts are expected back: the scarcity of DRAM, in seconds.

A promotion holds DRAM from its read until its user returns. That is worth it only while DRAM
keeps entries expected back that far off anyway: when the ranking is evicting entries expected
back in 50 s, a session read 30 s before its expected return holds DRAM about as long as what it
displaces, and the displaced entry is then read back. How soon the evicted entries are expected
back says how scarce DRAM is, whatever the disk: a fast disk leaves promotion idle time to spend,
and on scarce DRAM that time is best spent close to the return (bidaw-prefetch caps its horizon
with it).

`observe(wait)`: one eviction by the ranking, of an entry expected back in `wait` seconds
(entries evicted as ended say nothing of DRAM's scarcity and are not passed). `typical()`: the
exponentially weighted geometric mean of those waits (think times are log-normal), about the
last `1 / weight` evictions; None before the first. Pure and O(1).
"""
from __future__ import annotations

import math


class EvictedWait:
    def __init__(self, weight: float = 0.02) -> None:
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"EvictedWait needs 0 < weight <= 1, got {weight}")
        self.weight = weight
        self._log: float | None = None

    def observe(self, wait_s: float) -> None:
        x = math.log(max(wait_s, 1.0))  # a second or less: due now, as good as one second
        self._log = x if self._log is None else self._log + self.weight * (x - self._log)

    def typical(self) -> float | None:
        return None if self._log is None else math.exp(self._log)
