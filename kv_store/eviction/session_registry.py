"""Per-session metadata a policy keeps across evictions, forgotten after a long idle time.

Sessions come back after being evicted, so what a policy learned about them (last access, last
answer, history) must outlive their residency; sessions idle longer than `forget_after_s` and not
resident are dropped, oldest first, O(1) amortised per access.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

Key = Hashable
M = TypeVar("M")


class SessionRegistry(Generic[M]):
    def __init__(self, factory: Callable[[], M], forget_after_s: float = 7200.0) -> None:
        self._factory = factory
        self._forget_after = forget_after_s
        self._meta: OrderedDict[Key, M] = OrderedDict()
        self._seen_at: dict[Key, float] = {}

    def get(self, key: Key) -> M | None:
        return self._meta.get(key)

    def touch(self, key: Key, now: float, resident: Callable[[Key], bool]) -> M:
        """The metadata of `key` (created if new), marked as used at `now`; prunes stale sessions."""
        meta = self._meta.get(key)
        if meta is None:
            meta = self._factory()
            self._meta[key] = meta
        else:
            self._meta.move_to_end(key)
        self._seen_at[key] = now
        limit = now - self._forget_after
        for _ in range(2):  # a couple per call: bounded work, still keeps up with arrivals
            old = next(iter(self._meta))
            if self._seen_at[old] >= limit:
                break
            if resident(old):
                self._meta.move_to_end(old)  # still cached: keep it, look again later
                continue
            del self._meta[old]
            del self._seen_at[old]
        return meta

    def __len__(self) -> int:
        return len(self._meta)
