"""Promotions (SSD -> DRAM loads) as the store runs them: asked for by the scheduler, queued on
the Promoter (bounded concurrency), each a read that lands in DRAM when room can be made, then a
pin until the turn it was for reads it. Every step is published on the Awareness stream."""
from __future__ import annotations

import logging
import threading
import time

from services.runtime import metrics

from kv_store import errors
from kv_store.events import EventHub, LoadDone, Location
from kv_store.promoter import Promoter
from kv_store.read_path import ReadPath
from kv_store.session_index import SessionIndex
from kv_store.store_state import Tier, check_session_id
from kv_store.tier_space import TierSpace

log = logging.getLogger("bidaw.kv_store")


class Promotions:
    def __init__(self, index: SessionIndex, reads: ReadPath, space: TierSpace,
                 promoter: Promoter, events: EventHub, lock: threading.RLock,
                 hold_seconds: float):
        self.index = index
        self.reads = reads
        self.space = space
        self.promoter = promoter
        self.events = events
        self._lock = lock
        self.hold_seconds = hold_seconds

    def promote(self, session_id: str) -> Location:
        """Start an SSD -> DRAM load (bounded concurrency); LoadDone is published when done.
        KV in DRAM already is pinned there as a loaded one is: its turn is coming (a queued
        turn, or a client's prepare: its user is typing)."""
        check_session_id(session_id)
        self.index.refresh(session_id)
        with self._lock:
            loc = self.index.location(session_id)
            if loc.tier == Tier.DRAM:
                self.reads.hold_promoted(session_id, self.hold_seconds)
            if loc.tier != Tier.SSD:
                return loc
            self.promoter.request(session_id, loc.num_bytes)
            now = self.index.location(session_id)
        self.events.publish(now)
        return Location(session_id, loc.tier, loc.num_bytes, loc.num_tokens,
                        now.load_estimate_s)

    def load(self, session_id: str) -> None:
        """One promotion, on a Promoter thread."""
        start = time.monotonic()
        ok = False
        dram = self.space.dram
        try:
            with self._lock:  # no room in DRAM: reading it now would only be read again later
                room = session_id in dram or self.promoter.speculating(session_id) or \
                    self.space.make_room(self.index.ssd.file_bytes.get(session_id, 0),
                                         keep={session_id})  # (a prefetch made its own room)
            if room:
                self.reads.open_read(session_id).release()
            ok = session_id in dram
        except errors.StoreError as exc:
            log.info("promotion of %r failed: %s", session_id, exc.message)
        except Exception:
            log.exception("promotion of %r failed", session_id)
        with self._lock:
            loc = self.index.location(session_id)
            if ok:
                self.reads.hold_promoted(session_id, self.hold_seconds)
        if loc.tier == Tier.LOADING:  # still counted as running until load returns
            loc.tier, loc.load_estimate_s = (Tier.DRAM, 0.0) if ok else (Tier.SSD,
                                                                         loc.load_estimate_s)
        self.events.publish(loc)
        elapsed = time.monotonic() - start
        self.events.publish(LoadDone(session_id, ok, elapsed))
        metrics.PROMOTIONS.labels("ok" if ok else "failed").inc()
        metrics.PROMOTION_TIME.observe(elapsed)
        if ok:
            metrics.PROMOTION_BYTES.inc(loc.num_bytes)
