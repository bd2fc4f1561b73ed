"""The paper's reuse-distance regions, relative to the DRAM capacity C.

Bucket 0 is *small* (distance < C: any sane policy hits); buckets 1..K are *promising*, each
`width` × C wide (an optimal policy still hits sometimes); bucket K+1 is *extreme* (never a hit).
Defaults (K = 7 buckets of 0.2 C, so promising spans C..2.4 C) follow the paper's own figure
(200..480 GB in 40 GB steps for a 200 GB tier); docs/policies.md has the measured alternatives.
"""
from __future__ import annotations


class ReuseRegions:
    def __init__(self, capacity_bytes: int, width: float = 0.2, n_promising: int = 7) -> None:
        self.width = width
        self.n_promising = n_promising
        self.set_capacity(capacity_bytes)

    def set_capacity(self, capacity_bytes: int) -> None:
        self.capacity = max(int(capacity_bytes), 1)
        self._step = self.capacity * self.width

    @property
    def n_buckets(self) -> int:
        return self.n_promising + 2

    @property
    def extreme(self) -> int:
        return self.n_promising + 1

    def bucket(self, distance: float | None) -> int:
        """Region of a reuse distance in bytes; None (unknown / beyond memory) is extreme."""
        if distance is None:
            return self.extreme
        if distance < self.capacity:
            return 0
        return min(1 + int((distance - self.capacity) // self._step), self.extreme)
