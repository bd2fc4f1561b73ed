"""The DRAM tier's policy as its ledger sees it when the store promotes ahead of need
(`--eviction bidaw-prefetch`): every call goes to the store's policy, and the Prefetcher hears
what its planner needs to know.

- KV that lands in DRAM by a speculative read (on the Prefetcher's thread, inside
  `speculating()`) enters as promoted (`admit_prefetched`): no access, so the policy's model of
  return times learns only from the user's real return; a look at it from that thread is no
  access either.
- A turn's arrival ends the user's think time (`observe_arrival`: learnt then, not at the read a
  queue wait later); it, and any other admit, touch or answer, is the session coming back
  (`on_return`).
- An entry leaving the tier (`on_removed`) may become a candidate for promotion.
- Each demand read from SSD (`observe_demand_read`, from the read path) tells the policy how
  busy the disk is with demand, which moves its ranking's size exponent and its promotion
  horizon (bidaw_prefetch.py).

Called under the store lock, like the ledger.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Iterable

from kv_store.eviction.base import EvictionPolicy, Key
from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.time_scaled import TimeScaled


class PrefetchingPolicy(EvictionPolicy):
    def __init__(self, outer: EvictionPolicy, inner: BidawPrefetchPolicy, scale: float):
        """`outer`: the store's policy (`inner` seen through its clock: `now` / `scale`)."""
        self.outer = outer
        self.inner = inner
        self.scale = scale
        self.name = outer.name
        self.on_return: Callable[[Key], None] = lambda key: None
        self.on_landed: Callable[[Key, int], None] = lambda key, size: None
        self.on_removed: Callable[[Key], None] = lambda key: None
        self._thread = threading.local()

    @contextmanager
    def speculating(self):
        """What this thread brings into DRAM meanwhile is a speculative promotion."""
        self._thread.on = True
        try:
            yield
        finally:
            self._thread.on = False

    def _speculative(self) -> bool:
        return getattr(self._thread, "on", False)

    def admit(self, key: Key, size: int, now: float) -> None:
        if self._speculative():
            self.inner.admit_prefetched(key, size, now / self.scale)
            self.on_landed(key, size)
            return
        self.outer.admit(key, size, now)
        self.on_return(key)

    def touch(self, key: Key, size: int, now: float) -> None:
        if self._speculative():  # the speculative read found it in DRAM: nobody came back
            return
        self.outer.touch(key, size, now)
        self.on_return(key)

    def remove(self, key: Key) -> None:
        self.outer.remove(key)
        self.on_removed(key)

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        return self.outer.victim(now, exclude)

    def set_capacity(self, capacity_bytes: int, watermark_bytes: int | None = None) -> None:
        self.outer.set_capacity(capacity_bytes, watermark_bytes)

    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        self.outer.observe_answer(key, answer_tokens, now)
        self.on_return(key)

    def observe_arrival(self, key: Key, now: float) -> None:
        """A turn of `key` arrived (the Awareness stream): the user's think time ends now."""
        self.inner.observe_arrival(key, now / self.scale)
        self.on_return(key)

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        self.outer.observe_queue(upcoming, now)

    def observe_demand_read(self, start: float, end: float) -> None:
        """The SSD served a demand read over [start, end] (the read path): the policy's ranking
        follows the disk's load, as in the simulators."""
        self.inner.observe_demand_read(start / self.scale, end / self.scale)

    def __contains__(self, key: Key) -> bool:
        return key in self.outer

    def __len__(self) -> int:
        return len(self.outer)


def with_prefetch(policy: EvictionPolicy) -> EvictionPolicy:
    """`policy` as the DRAM ledger should see it: wrapped if it promotes ahead of need."""
    inner = policy.inner if isinstance(policy, TimeScaled) else policy
    if not isinstance(inner, BidawPrefetchPolicy):
        return policy
    return PrefetchingPolicy(policy, inner, policy.scale if policy is not inner else 1.0)

