"""One turn of the timed simulation, from its arrival to its last token."""
from __future__ import annotations


class Job:
    """One turn from arrival to its last token."""

    __slots__ = ("i", "user", "arrival", "dispatch", "first_token", "hist", "new_tokens",
                 "ctx", "pcie_bytes", "restore_tokens", "gpu_bytes", "remaining", "load_start",
                 "hit", "split_k")

    def __init__(self, i: int, user: int, arrival: float) -> None:
        self.i, self.user, self.arrival = i, user, arrival
        self.dispatch = self.first_token = 0.0
        self.hist = self.new_tokens = self.ctx = self.restore_tokens = self.remaining = 0
        self.pcie_bytes = self.gpu_bytes = 0
        self.load_start = -1.0
        self.hit = False  # counted as a DRAM hit at arrival
        self.split_k = 0  # bidaw-restore's SPLIT: only the first k history tokens are loaded
