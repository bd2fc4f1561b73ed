"""Bidaw's I/O-aware scheduling: a ready queue (FCFS) and a preparing queue (disk-HRRN).

Requests whose KV is in DRAM (or that have none) never wait behind an SSD load; loads start in
disk-HRRN order; a loaded request rejoins the ready queue at its original arrival position.
"""
from __future__ import annotations

from scheduler.policy.base import RequestQueue
from scheduler.policy.preparing_queue import PreparingQueue
from scheduler.policy.ready_queue import ReadyQueue
from scheduler.policy.request import READY, WAITING, QueuedRequest


class DualQueue(RequestQueue):
    name = "bidaw"

    def __init__(self, max_concurrent_loads: int = 2) -> None:
        super().__init__(max_concurrent_loads)
        self._ready = ReadyQueue()
        self._preparing = PreparingQueue()

    def _on_add(self, req: QueuedRequest) -> None:
        if req.state == READY:
            self._ready.push(req)
        elif req.state == WAITING:
            self._preparing.push(req)

    def _pick_load(self, now: float) -> QueuedRequest | None:
        req = self._preparing.best(now)
        if req is not None:
            self._preparing.discard(req)
        return req

    def _on_ready(self, req: QueuedRequest) -> None:
        self._ready.push(req)

    def _on_demote(self, req: QueuedRequest) -> None:
        self._ready.forget(req)

    def _on_drop(self, req: QueuedRequest) -> None:
        if req.state == WAITING:
            self._preparing.discard(req)
        elif req.state == READY:
            self._ready.forget(req)  # leaves a stale heap entry, skipped later

    def pop_ready(self) -> QueuedRequest | None:
        req = self._ready.pop()
        if req is not None:
            self._counts[READY] -= 1
            del self._by_id[req.request_id]
            self._order.discard(req)
        return req

    def peek_ready(self) -> QueuedRequest | None:
        return self._ready.peek()

    def hrrn_ratio(self, request_id, now: float) -> float:
        """R = 1 + waiting_time / kv_size of a queued request (inspection)."""
        return self._preparing.ratio(self._by_id[request_id], now)
