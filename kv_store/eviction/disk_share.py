"""The share of recent disk time spent on demand reads, exponentially weighted.

Where demand reads fill the disk, every miss waits behind the others and the bytes read are fixed
by the disk, not by the policy: what the policy still controls is how many turns DRAM serves,
so it should weigh hits per DRAM byte more (bidaw-prefetch raises its size exponent with this
share). The caller reports each demand read's busy interval; `share(now)` is the fraction of
about the last `tau_s` seconds they took. Pure: time is an argument; O(1).
"""
from __future__ import annotations

import math


class DemandShare:
    def __init__(self, tau_s: float = 300.0) -> None:
        if tau_s <= 0:
            raise ValueError(f"tau_s must be > 0, got {tau_s}")
        self.tau_s = tau_s
        self._busy = 0.0      # exponentially weighted busy seconds, as of `_at`
        self._at = float("-inf")

    def read(self, start: float, end: float) -> None:
        """The disk served a demand read from `start` to `end` (reports in order of `end`)."""
        if end <= start:
            return
        if end > self._at:
            self._busy = (0.0 if self._at == float("-inf")
                          else self._busy * math.exp((self._at - end) / self.tau_s))
            self._at = end
        tau = self.tau_s
        # ∫ exp(-(_at - x) / tau) dx over [start, end]: older busy time weighs less
        self._busy += tau * (math.exp((end - self._at) / tau) - math.exp((start - self._at) / tau))

    def share(self, now: float) -> float:
        """Fraction of the recent disk time demand reads took, in [0, 1]."""
        if self._at == float("-inf"):
            return 0.0
        busy = self._busy * math.exp(-max(now - self._at, 0.0) / self.tau_s)
        return min(busy / self.tau_s, 1.0)
