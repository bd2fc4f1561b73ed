"""The preparing queue: requests whose KV is on SSD, loaded in disk-HRRN order.

Response ratio R = 1 + waiting_time / kv_size: small KV first, while a large KV's ratio grows with
its wait so it cannot starve. R's order changes as time passes, so no static heap key exists;
instead the candidates live in flat numpy arrays (swap-remove on delete) and each pick is one
vectorised argmax of (now - arrival) / size: O(n) in C, about 20 µs at 10,000 queued requests,
and no re-sort ever. Ties (e.g. all waits zero) go to the smaller KV, then to the earlier arrival.
"""
from __future__ import annotations

import numpy as np

from scheduler.policy.request import QueuedRequest

_INITIAL = 64


class PreparingQueue:
    __slots__ = ("_arrival", "_inv_size", "_reqs", "_n")

    def __init__(self) -> None:
        self._arrival = np.empty(_INITIAL, dtype=np.float64)
        self._inv_size = np.empty(_INITIAL, dtype=np.float64)
        self._reqs: list[QueuedRequest] = []
        self._n = 0

    def push(self, req: QueuedRequest) -> None:
        n = self._n
        if n == len(self._arrival):
            self._arrival = np.resize(self._arrival, 2 * n)
            self._inv_size = np.resize(self._inv_size, 2 * n)
        self._arrival[n] = req.arrival_time
        self._inv_size[n] = 1.0 / max(req.kv_bytes, 1)
        self._reqs.append(req)
        req.slot = n
        self._n = n + 1

    def discard(self, req: QueuedRequest) -> None:
        i = req.slot
        if i < 0 or i >= self._n or self._reqs[i] is not req:
            return
        last = self._n - 1
        if i != last:  # move the last entry into the hole
            moved = self._reqs[last]
            self._reqs[i] = moved
            self._arrival[i] = self._arrival[last]
            self._inv_size[i] = self._inv_size[last]
            moved.slot = i
        self._reqs.pop()
        self._n = last
        req.slot = -1

    def ratio(self, req: QueuedRequest, now: float) -> float:
        """R of one queued request (for inspection and tests)."""
        return 1.0 + (now - req.arrival_time) / max(req.kv_bytes, 1)

    def best(self, now: float) -> QueuedRequest | None:
        """The request with the highest R at `now` (not removed)."""
        n = self._n
        if n == 0:
            return None
        if n == 1:
            return self._reqs[0]
        score = (now - self._arrival[:n]) * self._inv_size[:n]
        top = int(score.argmax())
        tied = np.flatnonzero(score == score[top])
        if len(tied) == 1:
            return self._reqs[top]
        reqs = self._reqs
        return min((reqs[i] for i in tied), key=lambda r: (r.kv_bytes, r.arrival_seq))

    def __len__(self) -> int:
        return self._n
