"""One turn of the timed simulation, from its arrival to its last token."""
from __future__ import annotations


class Job:
    """One turn from arrival to its last token."""

    __slots__ = ("i", "user", "arrival", "dispatch", "first_token", "hist", "new_tokens",
                 "ctx", "pcie_bytes", "restore_tokens", "gpu_bytes", "remaining", "load_start",
                 "hit", "split_k", "rev_k", "piece", "piece_done", "landed",
                 "gpu_held")

    def __init__(self, i: int, user: int, arrival: float) -> None:
        self.i, self.user, self.arrival = i, user, arrival
        self.dispatch = self.first_token = 0.0
        self.hist = self.new_tokens = self.ctx = self.restore_tokens = self.remaining = 0
        self.pcie_bytes = self.gpu_bytes = 0
        self.load_start = -1.0
        self.hit = False  # counted as a DRAM hit at arrival
        self.split_k = 0  # bidaw-restore's SPLIT: only the first k history tokens are loaded
        # SPLIT_REVERSED: the first rev_k history tokens are recomputed (a GPU piece that needs
        # no KV, run while the rest loads); piece: 0 none, 1 due, 2 on the GPU, 3 done
        self.rev_k = self.piece = self.piece_done = 0  # piece_done: its tokens computed
        self.landed = False    # SPLIT_REVERSED: the suffix's read is done
        self.gpu_held = False  # its GPU KV budget is taken (from the piece on)
