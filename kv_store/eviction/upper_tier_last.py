"""An inclusive lower tier's order: `inner`'s, except that keys the tier above also holds go
after all the others (among themselves, in `inner`'s order again).

The SSD tier is inclusive of DRAM: dropping a session's SSD copy drops its DRAM copy with it, so
the SSD tier gives up first what only it holds. Pure: `upper` is a collection of the keys the
tier above holds, which its owner keeps current.
"""
from __future__ import annotations

from typing import Collection

from kv_store.eviction.base import EvictionPolicy, Key


class UpperTierLast(EvictionPolicy):
    def __init__(self, inner: EvictionPolicy, upper: Collection[Key]):
        self.inner = inner
        self.upper = upper
        self.name = inner.name

    def admit(self, key: Key, size: int, now: float) -> None:
        self.inner.admit(key, size, now)

    def touch(self, key: Key, size: int, now: float) -> None:
        self.inner.touch(key, size, now)

    def remove(self, key: Key) -> None:
        self.inner.remove(key)

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        found = self.inner.victim(now, {*exclude, *self.upper})
        return found if found is not None else self.inner.victim(now, exclude)

    def __contains__(self, key: Key) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)
