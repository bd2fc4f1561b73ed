"""The one interface every eviction policy implements.

Policies are pure: no I/O, no clocks (time is an argument, in seconds). The KV store service and
the simulator drive the very same classes. A policy only orders the entries of ONE tier; the
caller owns the bytes and the capacity accounting and calls `victim` until enough is free.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable, Iterable

Key = Hashable


class EvictionPolicy(ABC):
    """Orders the entries of a tier for eviction. Every decision must be O(log n)."""

    name: str = "base"

    @abstractmethod
    def admit(self, key: Key, size: int, now: float) -> None:
        """`key` entered the tier (first write, or brought back after a miss) with `size` bytes."""

    @abstractmethod
    def touch(self, key: Key, size: int, now: float) -> None:
        """`key`, already in the tier, was accessed; its size is now `size` bytes."""

    @abstractmethod
    def remove(self, key: Key) -> None:
        """`key` left the tier (evicted, freed or dropped). Unknown keys are ignored."""

    @abstractmethod
    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        """The entry to evict next, never one in `exclude` (leased or pinned); None if none.

        Does not remove it: the caller calls `remove` once the bytes are gone.
        """

    def set_capacity(self, capacity_bytes: int, watermark_bytes: int | None = None) -> None:
        """The size of the tier this policy orders, and the free bytes kept (for policies whose
        model of reuse depends on them; `make_policy` calls it)."""

    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        """A turn of `key`'s session finished with an answer of `answer_tokens` tokens."""

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        """The sessions of the queued requests, soonest first (the scheduler's look-ahead)."""

    def __contains__(self, key: Key) -> bool:  # pragma: no cover - subclasses override
        raise NotImplementedError

    def __len__(self) -> int:  # pragma: no cover - subclasses override
        raise NotImplementedError
