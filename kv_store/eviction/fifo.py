"""FIFO: evict the entry that entered the tier first; hits do not refresh it."""
from __future__ import annotations

from kv_store.eviction.base import Key
from kv_store.eviction.heap_policy import HeapPolicy


class FifoPolicy(HeapPolicy):
    name = "fifo"

    def _rank_on_admit(self, key: Key, size: int, now: float) -> float:
        return now
