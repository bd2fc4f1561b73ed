"""A tiny event heap: (time, insertion order, kind, payload), earliest first, FIFO among ties."""
from __future__ import annotations

import heapq
from typing import Any

ARRIVAL, LOAD_DONE, GPU_DONE = 0, 1, 2


class EventHeap:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0

    def push(self, time: float, kind: int, payload: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, payload))

    def pop(self) -> tuple[float, int, int, Any]:
        return heapq.heappop(self._heap)

    def next_time(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)
