"""LRU: evict the entry whose last access is oldest (ties: the one that entered first)."""
from __future__ import annotations

from kv_store.eviction.base import Key
from kv_store.eviction.heap_policy import HeapPolicy


class LruPolicy(HeapPolicy):
    name = "lru"

    def _rank_on_admit(self, key: Key, size: int, now: float) -> float:
        return now

    def _rank_on_touch(self, key: Key, size: int, now: float) -> float:
        return now
