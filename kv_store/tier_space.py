"""Room in the tiers: DRAM regions carved for new KV (evicting what the policy gives up), and SSD
bytes reserved under the tier's bound (evicting the oldest sessions not in use).

What is never evicted: DRAM KV leased, being written to SSD (the tier is inclusive), asked to be
kept, or needed by a queued turn (evicting that only means reading it back from SSD); SSD KV
leased, being written or loaded. Eviction from SSD drops the session (its DRAM copy with it):
what falls out is recomputed from the conversation's tokens. Called under the store lock,
except the `release_*` calls, which take it.
"""
from __future__ import annotations

import threading
import time

from services.runtime import metrics

from kv_store.compute_signals import ComputeSignals
from kv_store.events import EventHub
from kv_store.leases import Leases
from kv_store.promoter import Promoter
from kv_store.session_index import SessionIndex
from kv_store.store_state import StoreCounters
from kv_store.tiers.aligned_io import align_up
from kv_store.tiers.buffers import Payload
from kv_store.tiers.dram import DramTier, ShmPiece
from kv_store.tiers.shm_arena import Segment
from kv_store.tiers.ssd import SsdTier
from kv_store.tiers.ssd_writer import OrderedWriter


class TierSpace:
    def __init__(self, dram: DramTier, ssd: SsdTier, ssd_bytes: int, index: SessionIndex,
                 signals: ComputeSignals, leases: Leases, writer: OrderedWriter,
                 promoter: Promoter, counters: StoreCounters, events: EventHub,
                 lock: threading.RLock):
        self.dram = dram
        self.ssd = ssd
        self.ssd_bytes = ssd_bytes
        self.index = index
        self.signals = signals
        self.leases = leases
        self.writer = writer
        self.promoter = promoter
        self.counters = counters
        self.events = events
        self._lock = lock

    # -- DRAM -------------------------------------------------------------------------------

    def make_room(self, need: int, keep: set[str]) -> bool:
        """Evict until a region of `need` bytes can be carved; False, evicting nothing, if
        evicting every entry not held would not free enough."""
        if need > self.dram.capacity:
            return False
        if self.dram.arena.fits(need):
            return True
        now = time.monotonic()
        exclude = self._held(now, keep)
        if not self._enough(need, exclude):
            return False
        evicted = []
        room = self.dram.make_room(need, now, exclude, on_evict=evicted.append)
        if evicted:  # per victim: the policy's choice and freeing its pages
            metrics.EVICTION_DECISION.observe((time.monotonic() - now) / len(evicted))
        for session_id in evicted:
            self.counters.dram_evictions += 1
            metrics.EVICTIONS.labels("dram").inc()
            self.events.publish(self.index.location(session_id))
        return room

    def could_make_room(self, need: int, keep: set[str]) -> bool:
        """Whether evicting every DRAM entry not held would free `need` bytes (a prepared load
        is tried again only then)."""
        now = time.monotonic()
        return self.dram.arena.fits(need) or self._enough(need, self._held(now, keep))

    def _enough(self, need: int, exclude: set[str]) -> bool:
        """O(held): every entry's bytes less the held ones' (a few: leased, queued, written)."""
        held = sum(self.dram.size(s) for s in exclude if s in self.dram)
        return self.dram.arena.free() + self.dram.ledger.used - held >= align_up(need)

    def _held(self, now: float, keep: set[str]) -> set[str]:
        return self.leases.held(now) | keep | self.writer.keys() | self.signals.waiting(now)

    def dram_segments(self, session_id: str, start_token: int,
                      nbytes: int) -> list[Segment] | None:
        """New segments for `nbytes` when they will extend or start a DRAM entry and room can
        be made for them."""
        if start_token != 0 and session_id not in self.dram:
            return None
        if nbytes <= 0 or not self.make_room(nbytes, keep={session_id}):
            return None
        return self.dram.arena.allocate(nbytes)

    def release_segments(self, segments: list[Segment]) -> None:
        with self._lock:
            for segment in segments:
                self.dram.arena.unref(segment)

    def release_pieces(self, pieces: list[ShmPiece]) -> None:
        with self._lock:
            self.dram.release(pieces)

    def release_payload(self, payload: Payload) -> None:
        with self._lock:
            payload.release(self.dram.arena.unref)

    # -- SSD --------------------------------------------------------------------------------

    def reserve_ssd(self, session_id: str, need: int, force: bool = False) -> bool:
        """Drop the oldest SSD sessions not in use until `need` more bytes fit under the bound
        (`force`: free `need` bytes whatever the bound says: the disk itself is full). Sessions
        also in DRAM go last, with their DRAM copy (the tier stays inclusive)."""
        if not force and self.ssd.used_bytes + need <= self.ssd_bytes:
            return True
        busy = (self.leases.held(time.monotonic()) | self.writer.keys() | {session_id}
                | self.promoter.keys())
        target = need if force else self.ssd.used_bytes + need - self.ssd_bytes
        freed = 0

        def evict(victim: str) -> None:
            nonlocal freed
            freed += self.ssd.file_bytes.get(victim, 0)
            self.index.forget(victim)
            self.counters.ssd_evictions += 1
            metrics.EVICTIONS.labels("ssd").inc()

        return self.index.ssd_order.make_room(need, self.index.clock(), busy,
                                              fits=lambda _: freed >= target, on_evict=evict)
