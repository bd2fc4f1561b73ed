"""Promotions (SSD -> DRAM loads) as the store runs them: asked for by the scheduler, queued on
the Promoter (bounded concurrency), each a read that lands in DRAM when room can be made, then a
pin until the turn it was for reads it. Every step is published on the Awareness stream.

A prepared load (a client's prepare: its user is typing) that finds no room is not dropped: DRAM
may be full only for now (KV still being written to SSD, or pinned for turns about to read it).
It is tried again while its pin's time (`hold_seconds`) lasts, whenever evicting what is not
held could make the room, until its turn arrives or its session ends."""
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
        self._retry: dict[str, float] = {}  # prepared loads that found no room -> until when

    def promote(self, session_id: str, prepared: bool = False) -> Location:
        """Start an SSD -> DRAM load (bounded concurrency; `prepared`: for a turn that has not
        arrived yet, behind every demand load); LoadDone is published when done. KV in DRAM
        already is pinned there as a loaded one is: its turn is coming (a queued turn, or a
        client's prepare: its user is typing)."""
        check_session_id(session_id)
        self.index.refresh(session_id)
        with self._lock:
            loc = self.index.location(session_id)
            if loc.tier == Tier.DRAM:
                self.reads.hold_promoted(session_id, self.hold_seconds)
            if loc.tier != Tier.SSD:
                return loc
            self._retry.pop(session_id, None)  # a demand load takes over; a new prepare restarts
            self.promoter.request(session_id, loc.num_bytes, prepared)
            now = self.index.location(session_id)
        self.events.publish(now)
        return Location(session_id, loc.tier, loc.num_bytes, loc.num_tokens,
                        now.load_estimate_s)

    def arrived(self, session_id: str) -> None:
        """The session's turn arrived: a prepared load still queued becomes a demand load, and
        one that found no room is the scheduler's to load now."""
        with self._lock:
            self._retry.pop(session_id, None)
        self.promoter.hasten(session_id)

    def forget(self, session_id: str) -> None:
        """The session ended: nothing to load for it any more."""
        with self._lock:
            self._retry.pop(session_id, None)

    def retry(self, now: float) -> None:
        """Queue again the prepared loads that found no room, where room can now be made
        (housekeeping; under neither lock)."""
        if not self._retry:  # the common case: no lock taken every half second
            return
        queued = []
        with self._lock:
            for session_id, until in list(self._retry.items()):
                loc = self.index.location(session_id)
                if until <= now or loc.tier != Tier.SSD:
                    del self._retry[session_id]
                elif session_id not in self.promoter and \
                        self.space.could_make_room(loc.num_bytes, keep={session_id}):
                    self.promoter.request(session_id, loc.num_bytes, prepared=True)
                    queued.append(self.index.location(session_id))
        for loc in queued:
            self.events.publish(loc)

    def waiting_for_room(self) -> int:
        with self._lock:
            return len(self._retry)

    def load(self, session_id: str, prepared: bool = False) -> None:
        """One promotion, on a Promoter thread."""
        start = time.monotonic()
        ok = False
        dram = self.space.dram
        try:
            with self._lock:  # no room in DRAM: reading it now would only be read again later
                need = self.index.ssd.file_bytes.get(session_id, 0)
                room = session_id in dram or self.promoter.speculating(session_id) or \
                    self.space.make_room(need, keep={session_id})  # (a prefetch made its own)
                if room:
                    self._retry.pop(session_id, None)
                elif prepared:
                    self._retry.setdefault(session_id, start + self.hold_seconds)
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
