"""Common base for policies that are 'evict the entry with the lowest priority key'.

Ties are broken by the order in which entries entered the tier (admission order), as the paper's
scripts do with whole-second timestamps; a hit does not change an entry's admission order.
"""
from __future__ import annotations

from typing import Any

from kv_store.eviction.base import EvictionPolicy, Key
from kv_store.eviction.lazy_heap import LazyHeap


class HeapPolicy(EvictionPolicy):
    name = "heap"

    def __init__(self) -> None:
        self._heap = LazyHeap()
        self._entered: dict[Key, int] = {}  # key -> admission sequence number
        self._seq = 0

    # Subclasses say how an entry ranks; lower is evicted first.
    def _rank_on_admit(self, key: Key, size: int, now: float) -> Any:
        raise NotImplementedError

    def _rank_on_touch(self, key: Key, size: int, now: float) -> Any | None:
        """The new rank after a hit, or None to keep the current one."""
        return None

    def admit(self, key: Key, size: int, now: float) -> None:
        self._seq += 1
        self._entered[key] = self._seq
        self._heap.set(key, (self._rank_on_admit(key, size, now), self._seq))

    def touch(self, key: Key, size: int, now: float) -> None:
        if key not in self._entered:
            self.admit(key, size, now)
            return
        rank = self._rank_on_touch(key, size, now)
        if rank is not None:
            self._heap.set(key, (rank, self._entered[key]))

    def remove(self, key: Key) -> None:
        if self._entered.pop(key, None) is not None:
            self._heap.discard(key)

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        return self._heap.peek(exclude)

    def __contains__(self, key: object) -> bool:
        return key in self._entered

    def __len__(self) -> int:
        return len(self._entered)
