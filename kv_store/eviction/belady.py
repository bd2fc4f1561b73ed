"""Belady (offline optimal for unit sizes): evict the entry whose next use is furthest away.

Needs the future: the driver calls `set_next_use(key, next_use)` before each admit/touch with the
position (or time) of the key's next access, `inf` or any value past the end if there is none.
Ties (e.g. several never used again) go to the entry that entered first, as the paper's scripts
do. For bounds only; a live system cannot run it.
"""
from __future__ import annotations

from kv_store.eviction.base import Key
from kv_store.eviction.heap_policy import HeapPolicy

NEVER = float("inf")


class BeladyPolicy(HeapPolicy):
    name = "belady"

    def __init__(self) -> None:
        super().__init__()
        self._next: dict[Key, float] = {}

    def set_next_use(self, key: Key, next_use: float) -> None:
        """Optional hook: when `key` is next accessed (larger = later)."""
        self._next[key] = next_use

    def _rank_on_admit(self, key: Key, size: int, now: float) -> float:
        return -self._next.get(key, NEVER)

    def _rank_on_touch(self, key: Key, size: int, now: float) -> float:
        return -self._next.get(key, NEVER)

    def remove(self, key: Key) -> None:
        super().remove(key)
        self._next.pop(key, None)
