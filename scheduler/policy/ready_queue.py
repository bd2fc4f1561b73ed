"""The ready queue: FCFS by arrival sequence, and a promoted request goes back to its ORIGINAL place.

A min-heap on `arrival_seq` does both in O(log n): arrivals push at the tail (largest seq so far),
a request whose load finished pushes with its old, smaller seq and so lands where it arrived.
Removal is lazy: an entry whose request left the queue or is no longer READY is skipped.
"""
from __future__ import annotations

import heapq

from scheduler.policy.request import READY, QueuedRequest


class ReadyQueue:
    __slots__ = ("_heap", "_live")

    def __init__(self) -> None:
        self._heap: list[tuple[int, QueuedRequest]] = []
        self._live = 0

    def push(self, req: QueuedRequest) -> None:
        req.state = READY
        heapq.heappush(self._heap, (req.arrival_seq, req))
        self._live += 1

    def forget(self, req: QueuedRequest) -> None:
        """`req` (READY, in this queue) left by another path; its heap entry goes stale."""
        self._live -= 1
        if len(self._heap) > 64 and len(self._heap) > 2 * self._live:
            self._heap = [e for e in self._heap if _valid(e[1])]
            heapq.heapify(self._heap)

    def peek(self) -> QueuedRequest | None:
        heap = self._heap
        while heap and not _valid(heap[0][1]):
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def pop(self) -> QueuedRequest | None:
        req = self.peek()
        if req is not None:
            heapq.heappop(self._heap)
            self._live -= 1
        return req

    def __len__(self) -> int:
        return self._live


def _valid(req: QueuedRequest) -> bool:
    return req.pos >= 0 and req.state == READY
