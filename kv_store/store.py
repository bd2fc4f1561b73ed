"""The KV store: its parts wired together, and the calls the gRPC service (service.py) makes.

The parts, each handed its collaborators: the DRAM tier (a shared-memory arena, in its eviction
ledger's order) and the SSD tier; the session index (what is known of each session, where it
is); the tier space (room by eviction in both tiers); the persister (the SSD side: durable
writes, verified reads); the read and write paths; promotions; the compute side's signals; with
`--eviction bidaw-prefetch`, the Prefetcher (promotion ahead of a predicted return, prefetcher.py).

Locking: one store lock guards the shared structures (index, tiers' bookkeeping, leases); disk
I/O runs outside it, under a per-session lock for reads and loads, and on the ordered writer
threads for SSD writes, so a slow disk write of one session does not stall the DRAM reads of
others. Every change of a session's location is published to the Awareness subscribers.

What a WriteKV reply promises: the new KV is readable from the store (DRAM, or SSD) when the
reply comes; `durable` says whether it is also fsync'd on SSD. A writer that allows it gets the
reply once the KV is in DRAM and its SSD copy is queued (durable=false); the copy follows in order,
and until it lands the session is pinned in DRAM (inclusive tier: eviction stays a drop). If that
copy fails (disk full), the session falls back to what is durable and the next turn recomputes
the rest. Otherwise, and whenever DRAM cannot hold the KV, the reply waits for the fsync.
"""
from __future__ import annotations

import logging
import threading
import time

from services.runtime import metrics

from kv_store import errors
from kv_store.catalog.factory import is_embedded, make_catalog
from kv_store.compute_signals import ComputeSignals
from kv_store.config import StoreConfig
from kv_store.events import EventHub
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import NEEDS_FUTURE, make_policy
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.prefetch_policy import PrefetchingPolicy, with_prefetch
from kv_store.prefetcher import PrefetchCounters, Prefetcher
from kv_store.promoter import Promoter
from kv_store.promotions import Promotions
from kv_store.path_parts import PathParts
from kv_store.read_path import ReadPath
from kv_store.session_index import SessionIndex
from kv_store.ssd_capacity import ssd_capacity
from kv_store.store_state import SessionLocks, StoreCounters, Tier, check_session_id
from kv_store.tier_space import TierSpace
from kv_store.tiers.bandwidth import BandwidthCap, BandwidthMeter
from kv_store.tiers.dir_lock import DirLock
from kv_store.tiers.dram import DramTier
from kv_store.tiers.shm_arena import ShmArena
from kv_store.tiers.ssd import SsdTier
from kv_store.tiers.ssd_writer import OrderedWriter
from kv_store.write_path import WritePath

log = logging.getLogger("bidaw.kv_store")


def make_store_policy(config: StoreConfig):
    """The DRAM tier's eviction policy by name, told the tier's capacity (1% kept free)."""
    if config.eviction in NEEDS_FUTURE:
        raise ValueError(f"--eviction {config.eviction} needs the future: simulator only")
    return make_policy(config.eviction, max(config.dram_bytes, 1),
                       max(config.dram_bytes // 100, 1), config.policy_time_scale)


class KVStore:
    def __init__(self, config: StoreConfig):
        self.config = config
        # first: a second store on this directory is refused before it touches anything
        self.dir_lock = DirLock(config.data_dir) if is_embedded(config.index) else None
        self.arena = ShmArena(config.shm_dir, config.dram_bytes)
        self.policy = with_prefetch(make_store_policy(config))  # bidaw-prefetch: promotes too
        self.dram = DramTier(self.arena, TierLedger(self.policy, self.arena.capacity))
        self.meter = BandwidthMeter(config.ssd_read_gbps * 1e9)
        cap = BandwidthCap(config.ssd_read_gbps_cap * 1e9, burst=config.ssd_io_bytes
                           if config.ssd_read_burst_bytes < 0 else config.ssd_read_burst_bytes)
        self.ssd = SsdTier(config.data_dir, config.ssd_direct_io, config.ssd_io_bytes,
                           config.ssd_read_depth, cap, self.meter)
        self.catalog = make_catalog(config.index, config.index_namespace)
        self.leases = Leases()
        self.counters = StoreCounters()
        self.events = EventHub()
        self._lock = threading.RLock()  # the store lock (see above)
        locks = SessionLocks()
        self.writer = OrderedWriter(config.ssd_write_concurrency)
        self.promoter = Promoter(config.promote_concurrency, self.meter, cap.rate)
        self.ssd_bytes = ssd_capacity(config, self.ssd.root)
        self.index = SessionIndex(self.dram, self.ssd, self.ssd_bytes, self.catalog,
                                  self.writer, self.promoter, self.events, self._lock)
        self.signals = ComputeSignals(self.policy, self.index, self.leases, self.writer,
                                      self.counters, self._lock, config.lease_seconds)
        space = TierSpace(self.dram, self.ssd, self.ssd_bytes, self.index, self.signals,
                          self.leases, self.writer, self.promoter, self.counters, self.events,
                          self._lock)
        persister = Persister(self.ssd, self.catalog, self.index, space, self.counters,
                              self._lock)
        parts = PathParts(self.index, self.dram, space, persister, self.writer, self.leases,
                          self.counters, self.events, self._lock, locks, config.lease_seconds,
                          getattr(self.policy, "observe_demand_read", None))
        self.reads = ReadPath(parts)
        self.writes = WritePath(parts)
        self.promotions = Promotions(self.index, self.reads, space, self.promoter, self.events,
                                     self._lock, config.promotion_hold_seconds)
        self.promoter.start(self.promotions.load)
        self.prefetcher = (Prefetcher(self.policy, space, self.reads, self.promoter, self._lock)
                           if isinstance(self.policy, PrefetchingPolicy) else None)
        if self.prefetcher is not None:  # a session gone from every tier is no candidate
            self.index.on_forget = self.prefetcher.ended
        for entry in self.catalog.load(self.ssd):
            self.index.adopt(entry)
        log.info("index (%s) holds %d sessions, %d bytes on SSD; DRAM regions in %s",
                 self.catalog.kind, len(self.index.metas), self.ssd.used_bytes, self.arena.dir)
        self._stop = threading.Event()
        self._housekeeper = threading.Thread(target=self._housekeep, name="store-housekeeping",
                                             daemon=True)
        self._housekeeper.start()
        if self.prefetcher is not None:
            self.prefetcher.start()
        for tier, used, size in (("dram", lambda: self.arena.used, config.dram_bytes),
                                 ("ssd", lambda: self.ssd.used_bytes, self.ssd_bytes)):
            metrics.TIER_BYTES.labels(tier).set_function(used)
            metrics.TIER_CAPACITY.labels(tier).set(size)
        metrics.TIER_SESSIONS.labels("dram").set_function(lambda: len(self.dram))
        metrics.TIER_SESSIONS.labels("ssd").set_function(lambda: len(self.ssd.file_bytes))
        for i, kind in enumerate(("demand", "prepared")):
            metrics.LOADS_WAITING_FOR_ROOM.labels(kind).set_function(
                lambda i=i: self.promotions.waiting_for_room()[i])

    # -- what the service calls -------------------------------------------------------------

    def lookup(self, session_id: str, lease: bool = False, lease_seconds: float = 0.0):
        """(meta or None, tier, lease id or '')."""
        check_session_id(session_id)
        self.index.refresh(session_id)
        with self._lock:
            meta = self.index.metas.get(session_id)
            if meta is None:
                return None, Tier.NONE, ""
            lease_id = ""
            if lease:
                lease_id = self.leases.acquire(session_id, time.monotonic(),
                                               lease_seconds or self.config.lease_seconds)
            return meta.copy(), self.index.tier(session_id), lease_id

    def release(self, lease_id: str) -> None:
        with self._lock:
            known = self.leases.release(lease_id)
            self.reads.release_hold(lease_id)
            self.writes.drop_expired_prepared()  # a prepared write given up: its region back
        if not known:
            raise errors.not_found(f"no lease {lease_id!r} (released or expired)")

    def stats(self) -> dict:
        """Fields of bidaw.v1.StoreStats."""
        queued, running, queued_bytes = self.promoter.stats()
        parked, parked_prepared = self.promotions.waiting_for_room()
        with self._lock:
            return dict(dram_bytes=self.dram.used, dram_capacity=self.dram.capacity,
                        dram_sessions=len(self.dram), ssd_bytes=self.ssd.used_bytes,
                        ssd_capacity=self.ssd_bytes, ssd_sessions=len(self.ssd.file_bytes),
                        promotions_pending=queued + running, promotions_running=running,
                        promotion_bytes_pending=queued_bytes,
                        dram_bytes_outside_entries=self.dram.used - self.dram.ledger.used,
                        ssd_writes_pending=self.writer.pending(),
                        loads_waiting_for_room=parked,
                        prepared_loads_waiting_for_room=parked_prepared,
                        ssd_read_gbps_measured=self.meter.rate / 1e9,
                        eviction_policy=self.policy.name, index=self.catalog.kind,
                        leases=len(self.leases), **vars(self.counters),
                        **vars(self.prefetcher.counters if self.prefetcher else PrefetchCounters()))

    def unfinished_writes(self) -> int:
        """What a stopping store waits for besides its calls (drain.py): regions prepared for
        a co-located write whose WriteKV has yet to come, and SSD copies queued or running."""
        with self._lock:
            return self.writes.prepared() + self.writer.pending()

    def snapshot(self):
        with self._lock:
            return [self.index.location(s) for s in self.index.metas]

    def subscribe(self):
        return self.events.subscribe()

    def unsubscribe(self, q) -> None:
        self.events.unsubscribe(q)

    def open_read(self, session_id: str, max_tokens: int = 0, start_token: int = 0):
        return self.reads.open_read(session_id, max_tokens, start_token=start_token)

    def open_shm_read(self, session_id: str, max_tokens: int, lease_seconds: float,
                      start_token: int = 0):
        return self.reads.open_shm_read(session_id, max_tokens, lease_seconds, start_token)

    def new_payload(self, session_id: str, start_token: int, nbytes: int):
        return self.writes.new_payload(session_id, start_token, nbytes)

    def prepare_shm_write(self, session_id: str, start_token: int, nbytes: int,
                          lease_seconds: float):
        return self.writes.prepare_shm_write(session_id, start_token, nbytes, lease_seconds)

    def take_prepared(self, region: str, session_id: str, nbytes: int):
        return self.writes.take_prepared(region, session_id, nbytes)

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, payload, wait_durable: bool = True,
              dtype: int = 0):
        return self.writes.write(session_id, start_token, token_ids, format, bytes_per_token,
                                 model, payload, wait_durable, dtype)

    def release_payload(self, payload) -> None:
        self.writes.release_payload(payload)

    def promote(self, session_id: str, announced: bool = False):
        """An SSD -> DRAM load for a turn that is coming; `announced`: its client said so (a
        prepare), and will again, so the prefetcher stops guessing for it."""
        loc = self.promotions.promote(session_id, prepared=announced)
        if announced and self.prefetcher is not None:
            with self._lock:
                self.prefetcher.announced(session_id)
        return loc

    def on_arrival(self, session_id: str) -> None:
        self.signals.on_arrival(session_id)
        self.promotions.arrived(session_id)
        if self.prefetcher is not None:
            with self._lock:
                self.policy.observe_arrival(session_id, time.monotonic())

    def on_turn_complete(self, session_id: str, answer_tokens: int) -> None:
        self.signals.on_turn_complete(session_id, answer_tokens)

    def on_session_end(self, session_id: str) -> None:
        with self._lock:  # a prepare's or a queued turn's pin must not keep an ended session
            self.reads.drop_promoted_hold(session_id)
            self.promotions.forget(session_id)
            if self.prefetcher is not None:
                self.prefetcher.ended(session_id)
        self.signals.on_session_end(session_id)

    # -- for benchmarks and tests ------------------------------------------------------------

    def forget(self, session_id: str) -> None:  # under the store lock
        self.index.forget(session_id)

    def demote(self, session_id: str) -> None:
        """Drop a session's DRAM copy, as an eviction would: what is on SSD stays there (wait
        for `writer` first to have all of it there)."""
        with self._lock:
            self.dram.drop(session_id)

    # -- housekeeping -----------------------------------------------------------------------

    def _housekeep(self) -> None:
        while not self._stop.wait(0.5):
            self.expire_leases()
            self.signals.finish_ends()
            self.promotions.retry(time.monotonic())

    def expire_leases(self) -> None:
        """Free the regions of read leases and prepared writes whose holder went quiet."""
        with self._lock:
            self.leases.expire(time.monotonic())
            self.reads.drop_expired_holds()
            self.writes.drop_expired_prepared()

    def close(self) -> None:
        self._stop.set()
        self._housekeeper.join(timeout=5)
        if self.prefetcher is not None:
            self.prefetcher.close()
        self.promoter.close()
        self.writer.close()  # queued SSD copies land before we go
        with self._lock:
            self.reads.close()
            self.writes.close()
        self.ssd.close()
        self.catalog.close()
        self.arena.close()
        if self.dir_lock is not None:
            self.dir_lock.release()
