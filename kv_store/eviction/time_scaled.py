"""A policy seen through a scaled clock: `now` is divided by `scale` before the policy sees it.

A trace replayed at x0.02 compresses users' think times 50-fold, while the policies' priors
(think time per answer token, ghost-cache lag) are in trace seconds. Replaying with the policy
clock scaled by the same factor keeps those priors true; in production the scale is 1.
"""
from __future__ import annotations

from typing import Iterable

from kv_store.eviction.base import EvictionPolicy, Key


class TimeScaled(EvictionPolicy):
    def __init__(self, inner: EvictionPolicy, scale: float):
        if scale <= 0:
            raise ValueError("the policy time scale must be positive")
        self.inner = inner
        self.scale = scale
        self.name = inner.name

    def admit(self, key: Key, size: int, now: float) -> None:
        self.inner.admit(key, size, now / self.scale)

    def touch(self, key: Key, size: int, now: float) -> None:
        self.inner.touch(key, size, now / self.scale)

    def remove(self, key: Key) -> None:
        self.inner.remove(key)

    def victim(self, now: float, exclude=frozenset()) -> Key | None:
        return self.inner.victim(now / self.scale, exclude)

    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        self.inner.observe_answer(key, answer_tokens, now / self.scale)

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        self.inner.observe_queue(upcoming, now / self.scale)

    def __contains__(self, key: Key) -> bool:
        return key in self.inner

    def __len__(self) -> int:
        return len(self.inner)

    def set_capacity(self, capacity_bytes: int, watermark_bytes: int | None = None) -> None:
        self.inner.set_capacity(capacity_bytes, watermark_bytes)

    def __getattr__(self, name: str):  # the simulator's hooks (set_next_use) pass through
        attr = getattr(self.inner, name)
        if name == "observe_demand_read":  # the disk's busy time, in the policy's clock too
            return lambda start, end: attr(start / self.scale, end / self.scale)
        return attr
