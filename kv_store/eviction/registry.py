"""Eviction policies by name: `make_policy("lru")`. Modules are imported lazily on first use."""
from __future__ import annotations

import importlib
from typing import Any

from kv_store.eviction.base import EvictionPolicy

_CLASSES: dict[str, tuple[str, str]] = {
    "fifo": ("kv_store.eviction.fifo", "FifoPolicy"),
    "lru": ("kv_store.eviction.lru", "LruPolicy"),
    "queue-aware": ("kv_store.eviction.queue_aware", "QueueAwarePolicy"),
    "bidaw": ("kv_store.eviction.bidaw", "BidawPolicy"),
    "bidaw-size": ("kv_store.eviction.bidaw_size", "BidawSizePolicy"),
    "belady": ("kv_store.eviction.belady", "BeladyPolicy"),
}

POLICY_NAMES: tuple[str, ...] = tuple(_CLASSES)

# Policies that need the future (the simulator must call `set_next_use`); never for live serving.
NEEDS_FUTURE: frozenset[str] = frozenset({"belady"})


def policy_class(name: str) -> type[EvictionPolicy]:
    try:
        module, cls = _CLASSES[name]
    except KeyError:
        raise ValueError(f"unknown eviction policy {name!r}; known: {', '.join(POLICY_NAMES)}") from None
    return getattr(importlib.import_module(module), cls)


def make_policy(name: str, **kwargs: Any) -> EvictionPolicy:
    """A fresh policy. Unknown kwargs raise TypeError (see each class for its parameters)."""
    return policy_class(name)(**kwargs)
