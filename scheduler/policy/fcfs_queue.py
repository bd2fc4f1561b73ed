"""The FCFS baseline: one queue in arrival order; a head whose KV is on SSD blocks everyone.

`prefetch_window` says how far behind the head SSD loads may start (in arrival order):
1 = load only when a request reaches the head; 30 = CachedAttention's scheduler-aware
prefetching of the next requests in the job queue; 0 = unlimited.

`ssd_aware=False` is the scheduler that does not know where KV is (vLLM with LMCache's default,
synchronous connector): every request is READY on arrival and dispatched in arrival order, and
the worker reads KV from SSD itself, inside its batch step, stalling every running sequence.
"""
from __future__ import annotations

import heapq

from scheduler.policy.base import RequestQueue
from scheduler.policy.request import READY, WAITING, QueuedRequest


class FCFSQueue(RequestQueue):
    name = "fcfs"

    def __init__(self, max_concurrent_loads: int = 2, prefetch_window: int = 1,
                 ssd_aware: bool = True) -> None:
        super().__init__(max_concurrent_loads)
        if prefetch_window < 0:
            raise ValueError("prefetch_window must be >= 0 (0 = unlimited)")
        self.prefetch_window = prefetch_window
        self.ssd_aware = ssd_aware
        self._waiting: list[tuple[int, QueuedRequest]] = []  # by seq; stale entries skipped

    def _state_on_arrival(self, kv_location: str) -> str:
        return super()._state_on_arrival(kv_location) if self.ssd_aware else READY

    def _on_add(self, req: QueuedRequest) -> None:
        if req.state == WAITING:
            heapq.heappush(self._waiting, (req.arrival_seq, req))

    def _pick_load(self, now: float) -> QueuedRequest | None:
        heap = self._waiting
        while heap and (heap[0][1].pos < 0 or heap[0][1].state != WAITING):
            heapq.heappop(heap)
        if not heap:
            return None
        req = heap[0][1]
        if self.prefetch_window and not self._within_window(req):
            return None
        heapq.heappop(heap)
        return req

    def _within_window(self, req: QueuedRequest) -> bool:
        return any(r is req for r in self._order.iter_first(self.prefetch_window))

    def _on_drop(self, req: QueuedRequest) -> None:
        if len(self._waiting) > 64 and len(self._waiting) > 2 * max(self._counts[WAITING], 1):
            self._waiting = [e for e in self._waiting if e[1].pos >= 0 and e[1].state == WAITING
                             and e[1] is not req]
            heapq.heapify(self._waiting)

    def peek_ready(self) -> QueuedRequest | None:
        head = self._order.first()
        return head if head is not None and head.state == READY else None
