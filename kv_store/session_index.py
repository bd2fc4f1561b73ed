"""What the store knows of each session, and where its KV is.

Per session: its latest meta (a DRAM-only tail included, until its SSD copy lands), the catalog
version that state is based on, and its place in the SSD tier's eviction order. Adopting a
catalog entry (start-up, another replica's write, a failed write reverted to what is durable)
and forgetting a session go through here, and every such change of location is published to the
Awareness subscribers. Called under the store lock, except `refresh`, which reads the catalog
outside it.
"""
from __future__ import annotations

import itertools
import threading
from typing import Callable

from kv_store.catalog.base import Catalog, CatalogEntry
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import make_policy
from kv_store.eviction.upper_tier_last import UpperTierLast
from kv_store.events import EventHub, Location
from kv_store.promoter import Promoter
from kv_store.session_meta import SessionMeta
from kv_store.store_state import Tier
from kv_store.tiers.dram import DramTier
from kv_store.tiers.ssd import SsdTier
from kv_store.tiers.ssd_writer import OrderedWriter


class SessionIndex:
    def __init__(self, dram: DramTier, ssd: SsdTier, ssd_bytes: int, catalog: Catalog,
                 writer: OrderedWriter, promoter: Promoter, events: EventHub,
                 lock: threading.RLock):
        self.dram = dram
        self.ssd = ssd
        self.catalog = catalog
        self.writer = writer
        self.promoter = promoter
        self.events = events
        self._lock = lock
        self.metas: dict[str, SessionMeta] = {}
        self.versions: dict[str, int] = {}  # catalog version the local state is based on
        # The SSD tier's order: least recently written or read first, sessions also in DRAM
        # after all others. Its clock counts accesses (the exact order, never a tie). Sizes are
        # not kept here: the SSD tier's files are the truth of its bytes (TierSpace counts them).
        self.ssd_order = TierLedger(UpperTierLast(make_policy("lru"), dram), ssd_bytes)
        self._accesses = itertools.count()
        self.on_forget: Callable[[str], None] | None = None  # the prefetcher's, if any

    # -- queries ----------------------------------------------------------------------------

    def tier(self, session_id: str) -> Tier:
        if session_id in self.dram:
            return Tier.DRAM
        if session_id in self.promoter:
            return Tier.LOADING
        return Tier.SSD if session_id in self.metas else Tier.NONE

    def location(self, session_id: str) -> Location:
        meta = self.metas.get(session_id)
        if meta is None:
            return Location(session_id, Tier.NONE, 0, 0, 0.0)
        tier = self.tier(session_id)
        estimate = 0.0 if tier == Tier.DRAM else self.promoter.estimate(session_id,
                                                                        meta.num_bytes)
        return Location(session_id, tier, meta.num_bytes, meta.num_tokens, estimate,
                        tier == Tier.SSD and self.promoter.is_parked(session_id),
                        self.promoter.landed_from(session_id) if tier == Tier.LOADING else 0)

    def clock(self) -> int:
        """The SSD order's time now."""
        return next(self._accesses)

    # -- changes ----------------------------------------------------------------------------

    def record_write(self, session_id: str, meta: SessionMeta) -> None:
        """A write makes `meta` the session's state (its SSD copy is on the way)."""
        self.metas[session_id] = meta
        self.ssd_order.admit(session_id, 0, self.clock())

    def touch_ssd(self, session_id: str) -> None:
        """The session was read from SSD."""
        if session_id in self.ssd_order:
            self.ssd_order.touch(session_id, self.clock())

    def adopt(self, entry: CatalogEntry) -> None:
        """Take a catalog entry as the session's state (start-up, or another replica wrote)."""
        sid = entry.meta.session_id
        self.dram.drop(sid)
        self.metas[sid] = entry.meta.copy()
        self.versions[sid] = entry.version
        self.ssd.set_length(sid, entry.ssd_len)
        self.ssd_order.admit(sid, 0, self.clock())

    def forget(self, session_id: str, local_only: bool = False) -> None:
        """Drop a session from every tier (`local_only`: from this replica's view only)."""
        self.dram.drop(session_id)
        if not local_only:
            self.ssd.delete(session_id)
            self.catalog.delete(session_id)
        self.metas.pop(session_id, None)
        self.versions.pop(session_id, None)
        self.ssd_order.remove(session_id)
        if self.on_forget is not None:
            self.on_forget(session_id)
        self.events.publish(Location(session_id, Tier.NONE, 0, 0, 0.0))

    def revert(self, session_id: str) -> None:
        """An SSD write failed: back to what is durable."""
        self.writer.cancel_queued(session_id)
        entry = self.catalog.get(session_id)
        if entry is None:
            self.forget(session_id, local_only=True)
            return
        self.adopt(entry)
        self.events.publish(self.location(session_id))

    def refresh(self, session_id: str) -> None:
        """With a shared index: take another replica's newer write of the session (takes the
        store lock itself; the catalog is read outside it)."""
        if self.catalog.kind == "embedded":
            return
        version = self.catalog.version(session_id)
        with self._lock:
            if version == self.versions.get(session_id) or self.writer.busy(session_id):
                return
        entry = self.catalog.get(session_id)
        with self._lock:
            if self.writer.busy(session_id):
                return
            if entry is None:
                if session_id in self.versions:
                    self.forget(session_id, local_only=True)
                return
            if entry.version == self.versions.get(session_id):
                return
            self.adopt(entry)
            loc = self.location(session_id)
        self.events.publish(loc)
