"""All queued requests in arrival order, with O(α(n)) amortised removal anywhere and 'first k'.

Requests are appended in increasing `arrival_seq`. A removed slot is linked to its successor in a
union-find 'next live slot' forest (path halving), so walking the first k live requests never
re-scans dead ones for long; the arrays are compacted once dead slots outnumber live ones.
"""
from __future__ import annotations

from typing import Iterator

from scheduler.policy.request import QueuedRequest


class ArrivalOrder:
    __slots__ = ("_slots", "_next", "_head", "_live", "_last_seq")

    def __init__(self) -> None:
        self._slots: list[QueuedRequest | None] = []
        self._next: list[int] = []  # _next[i] == i: slot i live (or the end sentinel)
        self._head = 0
        self._live = 0
        self._last_seq: int | None = None
        self._next.append(0)  # sentinel at index len(_slots)

    def append(self, req: QueuedRequest) -> None:
        if self._last_seq is not None and req.arrival_seq <= self._last_seq:
            raise ValueError(f"arrival_seq must increase: {req.arrival_seq} after {self._last_seq}")
        self._last_seq = req.arrival_seq
        i = len(self._slots)
        self._slots.append(req)
        self._next[i] = i           # the old sentinel becomes the live slot
        self._next.append(i + 1)    # new sentinel
        req.pos = i
        self._live += 1

    def discard(self, req: QueuedRequest) -> None:
        i = req.pos
        if i < 0 or i >= len(self._slots) or self._slots[i] is not req:
            return
        self._slots[i] = None
        self._next[i] = i + 1
        req.pos = -1
        self._live -= 1
        if len(self._slots) > 64 and len(self._slots) > 2 * self._live:
            self._compact()

    def _find(self, i: int) -> int:
        nxt = self._next
        while nxt[i] != i:
            nxt[i] = nxt[nxt[i]]  # path halving
            i = nxt[i]
        return i

    def first(self) -> QueuedRequest | None:
        self._head = self._find(self._head)
        return self._slots[self._head] if self._head < len(self._slots) else None

    def iter_first(self, k: int) -> Iterator[QueuedRequest]:
        """The first `k` live requests in arrival order (fewer if the queue is shorter)."""
        n = len(self._slots)
        i = self._find(self._head)
        self._head = i
        while k > 0 and i < n:
            yield self._slots[i]  # type: ignore[misc]
            k -= 1
            i = self._find(i + 1)

    def _compact(self) -> None:
        live = [r for r in self._slots if r is not None]
        self._slots = live
        for i, r in enumerate(live):
            r.pos = i
        self._next = list(range(len(live) + 1))
        self._head = 0

    def __len__(self) -> int:
        return self._live
