"""Every eviction policy by name, built one way: `make_policy("lru", capacity, watermark)`."""
from __future__ import annotations

from typing import Any

from kv_store.eviction.base import EvictionPolicy
from kv_store.eviction.belady import BeladyPolicy
from kv_store.eviction.bidaw import BidawPolicy
from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.bidaw_size import BidawSizePolicy
from kv_store.eviction.fifo import FifoPolicy
from kv_store.eviction.foresight_prefetch import ForesightPrefetchPolicy
from kv_store.eviction.lru import LruPolicy
from kv_store.eviction.queue_aware import QueueAwarePolicy
from kv_store.eviction.time_scaled import TimeScaled

_CLASSES: dict[str, type[EvictionPolicy]] = {
    "fifo": FifoPolicy,
    "lru": LruPolicy,
    "queue-aware": QueueAwarePolicy,
    "bidaw": BidawPolicy,
    "bidaw-size": BidawSizePolicy,
    "belady": BeladyPolicy,
    "bidaw-prefetch": BidawPrefetchPolicy,
    "foresight-prefetch": ForesightPrefetchPolicy,
}

# Policies that also promote ahead of need: only where SSD time is modelled (`--ssd-gbps`).
NEEDS_SSD_TIME: frozenset[str] = frozenset({"bidaw-prefetch", "foresight-prefetch"})
# The demand-caching policies: every mode and every tier can run them.
POLICY_NAMES: tuple[str, ...] = tuple(n for n in _CLASSES if n not in NEEDS_SSD_TIME)

# Policies that need the future (the simulator calls `set_next_use` / `set_next_time`); never
# for live serving.
NEEDS_FUTURE: frozenset[str] = frozenset({"belady", "foresight-prefetch"})
# What the live store can run (`bidaw serve store --eviction`).
LIVE_POLICY_NAMES: tuple[str, ...] = tuple(n for n in _CLASSES if n not in NEEDS_FUTURE)


def policy_class(name: str) -> type[EvictionPolicy]:
    """The class behind a policy name; ValueError naming the known ones."""
    try:
        return _CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; known: {', '.join(_CLASSES)}") from None


def make_policy(name: str, capacity: int | None = None, watermark: int | None = None,
                time_scale: float = 1.0, **args: Any) -> EvictionPolicy:
    """A fresh policy for a tier of `capacity` bytes keeping `watermark` free (None: the
    policy's defaults), its clock divided by `time_scale`. Unknown `args` raise TypeError."""
    policy = policy_class(name)(**args)
    if capacity is not None:
        policy.set_capacity(capacity, watermark)
    return policy if time_scale == 1.0 else TimeScaled(policy, time_scale)
