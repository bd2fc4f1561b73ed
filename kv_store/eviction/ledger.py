"""One tier's bytes in the order an eviction policy keeps: the one capacity loop of the live
store and of every simulator.

The ledger holds each entry's size and the tier's use; the policy only orders. `make_room`
evicts the policy's victims until `need` more bytes fit under `capacity - watermark`. Where
the bytes themselves decide what fits (the store's arena, which fragments), the caller passes
its own `fits`; `on_evict` lets it drop the bytes of each victim. Pure: no I/O, no clocks.
"""
from __future__ import annotations

from typing import Callable, Collection

from kv_store.eviction.base import EvictionPolicy, Key


class TierLedger:
    def __init__(self, policy: EvictionPolicy, capacity: int | None, watermark: int = 0):
        """`capacity` None: an unbounded tier (nothing is ever evicted)."""
        self.policy = policy
        self.capacity = capacity
        self.watermark = watermark
        self.sizes: dict[Key, int] = {}
        self.used = 0
        self.evictions = 0

    def __contains__(self, key: Key) -> bool:
        return key in self.sizes

    def __len__(self) -> int:
        return len(self.sizes)

    def size(self, key: Key) -> int:
        return self.sizes.get(key, 0)

    def fits(self, need: int = 0) -> bool:
        return self.capacity is None or self.used + need <= self.capacity - self.watermark

    def admit(self, key: Key, size: int, now: float) -> None:
        """`key` enters the tier with `size` bytes (already in: its size and recency change)."""
        if key in self.sizes:
            self.touch(key, now, size)
            return
        self.sizes[key] = size
        self.used += size
        self.policy.admit(key, size, now)

    def touch(self, key: Key, now: float, size: int | None = None) -> None:
        """An access of `key`, in the tier; `size`: its bytes now, if they changed."""
        if size is not None:
            self.resize(key, size)
        self.policy.touch(key, self.sizes[key], now)

    def resize(self, key: Key, size: int) -> None:
        """`key`'s bytes change without an access (the policy learns it at the next one)."""
        self.used += size - self.sizes[key]
        self.sizes[key] = size

    def remove(self, key: Key) -> int:
        """`key` leaves the tier; its bytes (0 if it was not in)."""
        size = self.sizes.pop(key, None)
        if size is None:
            return 0
        self.used -= size
        self.policy.remove(key)
        return size

    def make_room(self, need: int, now: float, exclude: Collection[Key] = frozenset(),
                  fits: Callable[[int], bool] | None = None,
                  on_evict: Callable[[Key], None] | None = None) -> bool:
        """Evict victims (never one in `exclude`) until `need` more bytes fit; False when the
        policy has no victim left first (those found are evicted all the same)."""
        fits = fits or self.fits
        while not fits(need):
            victim = self.policy.victim(now, exclude)
            if victim is None:
                return False
            if victim not in self.sizes:  # the policy knew it, the tier no longer holds it
                self.policy.remove(victim)
                continue
            self.remove(victim)
            self.evictions += 1
            if on_evict is not None:
                on_evict(victim)
        return True
