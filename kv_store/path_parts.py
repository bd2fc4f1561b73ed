"""What the read path and the write path both work over: the store's parts, handed in once."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from kv_store.events import EventHub
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.session_index import SessionIndex
from kv_store.store_state import SessionLocks, StoreCounters
from kv_store.tier_space import TierSpace
from kv_store.tiers.dram import DramTier
from kv_store.tiers.ssd_writer import OrderedWriter


@dataclass(frozen=True)
class PathParts:
    index: SessionIndex
    dram: DramTier
    space: TierSpace
    persister: Persister
    writer: OrderedWriter
    leases: Leases
    counters: StoreCounters
    events: EventHub
    lock: threading.RLock         # the store lock: metas, tiers, leases
    session_locks: SessionLocks   # one stripe per session: its reads and writes in order
    lease_seconds: float
    # the policy hears each demand read's busy interval from SSD (None: it does not listen)
    demand_read: Callable[[float, float], None] | None = None
