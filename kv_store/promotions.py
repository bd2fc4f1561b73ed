"""Promotions (SSD -> DRAM loads) as the store runs them: asked for by the scheduler, queued on
the Promoter (bounded concurrency), each a read that lands in DRAM when room can be made, then a
pin until the turn it was for reads it. Every step is published on the Awareness stream.

A load that finds no room is not dropped: DRAM may be full only for now, of KV that cannot go
yet (pinned for queued turns, leased to running ones, being written to SSD). Dropping it sent
the turn to its worker to read its KV from SSD inside its batch slot, while turns ahead of it
finished and freed the room a load needed. It is parked (its location says
`waiting_for_room`) and asked for again whenever evicting what is not held could make the room,
while its pin's time (`hold_seconds`) lasts: the room goes to the demand loads in disk-HRRN
order, and only to as many as it holds at once. When that time is up, a demand load (a queued
turn's) ends as one that failed (LoadDone, not ok: the turn runs and its worker reads from
SSD), and so does one whose turn no longer waits; a prepared one (a client's prepare) is
dropped, as it is when its turn arrives (the scheduler's load takes over) or its session ends.
KV larger than DRAM fails at once."""
from __future__ import annotations

import logging
import threading
import time

from services.runtime import metrics

from kv_store import errors
from kv_store.events import EventHub, LoadDone, Location
from kv_store.promoter import Promoter
from kv_store.read_path import ReadPath
from kv_store.room_order import room_order
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
            self.promoter.unpark(session_id)  # asked for again: a new wait for room
            self.promoter.request(session_id, loc.num_bytes, prepared)
            now = self.index.location(session_id)
        self.events.publish(now)
        return Location(session_id, loc.tier, loc.num_bytes, loc.num_tokens,
                        now.load_estimate_s)

    def arrived(self, session_id: str) -> None:
        """The session's turn arrived: a prepared load still queued becomes a demand load, and
        one that found no room is the scheduler's to load now."""
        with self._lock:  # (a demand load keeps waiting for room)
            self.promoter.unpark(session_id, prepared_only=True)
        self.promoter.hasten(session_id)

    def forget(self, session_id: str) -> None:
        """The session ended: nothing to load for it any more."""
        with self._lock:
            self.promoter.unpark(session_id)

    def retry(self, now: float) -> None:
        """Ask again for the parked loads where room can now be made; end those whose time is
        up or whose turn no longer waits (housekeeping; under neither lock)."""
        parked = self.promoter.parked()
        if not parked:  # the common case: no lock taken every half second
            return
        queued, ended = [], []
        with self._lock:
            waiting = self.space.signals.waiting(now)
            room, keep = 0, set()  # the loads asked for in this round land together
            order = room_order(parked, self.space.signals.arrived_at, now)
            for session_id, nbytes, prepared, until in order:
                loc = self.index.location(session_id)
                if until <= now or loc.tier != Tier.SSD or \
                        not (prepared or session_id in waiting):
                    self.promoter.unpark(session_id)
                    if not prepared:  # its turn runs now, from wherever its KV is
                        ended.append(loc)
                elif self.space.could_make_room(room + nbytes, keep=keep | {session_id}):
                    room += nbytes
                    keep.add(session_id)
                    self.promoter.request(session_id, loc.num_bytes, prepared)
                    queued.append(self.index.location(session_id))
        for loc in queued + ended:
            self.events.publish(loc)
        for loc in ended:
            ok = loc.tier == Tier.DRAM  # another read brought it in meanwhile
            self.events.publish(LoadDone(loc.session_id, ok, 0.0))
            metrics.PROMOTIONS.labels("ok" if ok else "failed").inc()

    def waiting_for_room(self) -> tuple[int, int]:
        """(demand, prepared) loads parked until room can be made."""
        parked = self.promoter.parked()  # one snapshot, one lock
        prepared = sum(entry[2] for entry in parked)
        return len(parked) - prepared, prepared

    def load(self, session_id: str, prepared: bool = False) -> None:
        """One promotion, on a Promoter thread."""
        start = time.monotonic()
        ok = parked = handed_over = False
        dram = self.space.dram
        try:
            with self._lock:  # no room in DRAM: reading it now would only be read again later
                need = self.index.ssd.file_bytes.get(session_id, 0)
                room = session_id in dram or self.promoter.speculating(session_id) or \
                    self.space.make_room(need, keep={session_id})  # (a prefetch made its own)
                if room:
                    self.promoter.unpark(session_id)
                elif need <= dram.capacity:  # full for now: wait for room
                    self.promoter.park(session_id, need, prepared, start + self.hold_seconds)
                    parked = True
            if room and (prepared or self.promoter.announced(session_id)):  # (arrived since)
                # end first: its turn may take over the end that has landed
                handed_over = not self.reads.load_prepared(session_id)
            elif room:
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
            loc.waiting_for_room = parked
        self.events.publish(loc)
        if parked:  # its LoadDone comes when it lands, or when its wait ends (retry)
            return
        self.promoter.unpark(session_id)  # (a parked load asked for again failed for good)
        elapsed = time.monotonic() - start
        self.events.publish(LoadDone(session_id, ok, elapsed))
        metrics.PROMOTIONS.labels("ok" if ok else "handed_over" if handed_over
                                  else "failed").inc()
        metrics.PROMOTION_TIME.observe(elapsed)
        if ok:
            metrics.PROMOTION_BYTES.inc(loc.num_bytes)
