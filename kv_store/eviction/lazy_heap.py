"""A min-heap of keys by priority with lazy deletion: every operation O(log n) amortised.

Each key holds one live heap entry; updating or removing a key only forgets its ticket, and stale
entries are dropped when they reach the top (or in a rebuild once they outnumber live ones).
"""
from __future__ import annotations

import heapq
from typing import Any, Hashable, Iterator

Key = Hashable


class LazyHeap:
    __slots__ = ("_heap", "_ticket", "_prio", "_next")

    def __init__(self) -> None:
        self._heap: list[tuple[Any, int, Key]] = []
        self._ticket: dict[Key, int] = {}
        self._prio: dict[Key, Any] = {}
        self._next = 0

    def set(self, key: Key, priority: Any) -> None:
        """Insert `key` or change its priority. Ties go to the key set first (FIFO)."""
        self._next += 1
        self._ticket[key] = self._next
        self._prio[key] = priority
        heapq.heappush(self._heap, (priority, self._next, key))
        if len(self._heap) > 64 and len(self._heap) > 3 * len(self._ticket):
            self._rebuild()

    def discard(self, key: Key) -> None:
        if self._ticket.pop(key, None) is not None:
            del self._prio[key]

    def priority(self, key: Key) -> Any:
        return self._prio[key]

    def peek(self, exclude: frozenset | set = frozenset()) -> Key | None:
        """The live key with the lowest priority that is not in `exclude`; None if there is none."""
        heap, ticket = self._heap, self._ticket
        skipped = []
        found = None
        while heap:
            _, tick, key = heap[0]
            if ticket.get(key) != tick:
                heapq.heappop(heap)
                continue
            if key in exclude:
                skipped.append(heapq.heappop(heap))
                continue
            found = key
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found

    def pop(self) -> Key | None:
        key = self.peek()
        if key is not None:
            self.discard(key)
        return key

    def _rebuild(self) -> None:
        ticket = self._ticket
        self._heap = [e for e in self._heap if ticket.get(e[2]) == e[1]]
        heapq.heapify(self._heap)

    def __contains__(self, key: object) -> bool:
        return key in self._ticket

    def __len__(self) -> int:
        return len(self._ticket)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._ticket)
