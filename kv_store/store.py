"""The store's state machine: index, DRAM and SSD tiers, leases, eviction and promotions.

The gRPC service (service.py) translates messages to these calls. One lock guards the shared
structures; disk I/O runs outside it, under a per-session lock for reads and loads, and on the
ordered writer threads for SSD writes, so a slow disk write of one session does not stall the
DRAM reads of others. Every change of a session's location is published to the Awareness
subscribers as a `Location` event. This file holds the state, eviction from both tiers,
promotions and the Awareness inputs; the read and write paths are in store_reads.py and
store_writes.py, the SSD side of both (durability, disk full, corruption, compaction) in
persist.py.

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
from collections import OrderedDict

from services.runtime import metrics

from kv_store import errors
from kv_store.tiers.bandwidth import BandwidthCap, BandwidthMeter
from kv_store.tiers.buffers import Payload, ReadHandle
from kv_store.catalog.base import make_catalog
from kv_store.config import StoreConfig
from kv_store.tiers.dram import DramTier
from kv_store.events import EventHub, LoadDone, Location
from kv_store.eviction.registry import NEEDS_FUTURE, make_policy
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.promoter import Promoter
from kv_store.session_meta import SessionMeta
from kv_store.tiers.shm_arena import ShmArena
from kv_store.tiers.ssd import SsdTier
from kv_store.tiers.ssd_writer import OrderedWriter
from kv_store.store_reads import ReadPath
from kv_store.store_state import (TIER_DRAM, TIER_LOADING, TIER_NONE, TIER_SSD, StoreCounters,
                          check_session_id)
from kv_store.store_writes import WritePath

log = logging.getLogger("bidaw.kv_store")

LOCK_STRIPES = 1024
MAX_QUEUED = 100_000  # arrivals remembered for the look-ahead; a lost completion must not leak


def make_store_policy(config: StoreConfig):
    """The DRAM tier's eviction policy by name, told the tier's capacity (1% kept free)."""
    if config.eviction in NEEDS_FUTURE:
        raise ValueError(f"--eviction {config.eviction} needs the future: simulator only")
    return make_policy(config.eviction, max(config.dram_bytes, 1),
                       max(config.dram_bytes // 100, 1), config.policy_time_scale)


class KVStore(ReadPath, WritePath):
    def __init__(self, config: StoreConfig):
        self.config = config
        self.arena = ShmArena(config.shm_dir, config.dram_bytes)
        self.dram = DramTier(self.arena)
        self.meter = BandwidthMeter(config.ssd_read_gbps * 1e9)
        cap = BandwidthCap(config.ssd_read_gbps_cap * 1e9, burst=config.ssd_io_bytes)
        self.ssd = SsdTier(config.data_dir, config.ssd_direct_io, config.ssd_io_bytes,
                           config.ssd_read_depth, cap, self.meter)
        self.catalog = make_catalog(config.index, config.index_namespace)
        self.policy = make_store_policy(config)
        self.leases = Leases()
        self.counters = StoreCounters()
        self.events = EventHub()
        self._metas: dict[str, SessionMeta] = {}  # latest state, DRAM-only tail included
        self._versions: dict[str, int] = {}  # catalog version the local state is based on
        self._ssd_lru: OrderedDict[str, None] = OrderedDict()  # SSD tier order, oldest first
        self._holds: dict[str, ReadHandle] = {}  # shm read lease -> the regions it keeps
        # session -> pin taken when its promotion landed: the load was asked for by a queued
        # turn, so the KV stays in DRAM until that turn reads it (or the pin expires).
        self._promoted: dict[str, str] = {}
        # prepared co-located write: region name -> (session, payload, lease)
        self._prepared: dict[str, tuple[str, Payload, str]] = {}
        self._queued: list[str] = []  # sessions of queued requests, soonest first
        # session -> when its turn arrived: its KV is not evicted to make room for a while (a
        # turn that fails never completes, so the protection must expire on its own)
        self._queued_at: dict[str, float] = {}
        self._lock = threading.RLock()
        self._stripes = [threading.Lock() for _ in range(LOCK_STRIPES)]
        self.writer = OrderedWriter(config.ssd_write_concurrency)
        self.persister = Persister(self)
        self.promoter = Promoter(config.promote_concurrency, self._load, self.meter, cap.rate)
        for entry in self.catalog.load(self.ssd):
            self._adopt(entry)
        log.info("index (%s) holds %d sessions, %d bytes on SSD; DRAM regions in %s",
                 self.catalog.kind, len(self._metas), self.ssd.used_bytes, self.arena.dir)
        self._stop = threading.Event()
        self._housekeeper = threading.Thread(target=self._housekeep, name="store-housekeeping",
                                             daemon=True)
        self._housekeeper.start()
        for tier, used, cap in (("dram", lambda: self.arena.used, config.dram_bytes),
                                ("ssd", lambda: self.ssd.used_bytes, config.ssd_bytes)):
            metrics.TIER_BYTES.labels(tier).set_function(used)
            metrics.TIER_CAPACITY.labels(tier).set(cap)
        metrics.TIER_SESSIONS.labels("dram").set_function(lambda: len(self.dram))
        metrics.TIER_SESSIONS.labels("ssd").set_function(lambda: len(self.ssd.file_bytes))

    def _session_lock(self, session_id: str) -> threading.Lock:
        """Serialises the writes and SSD loads of a session (striped: a bounded set of locks,
        whatever the number of sessions; two sessions rarely share one)."""
        return self._stripes[hash(session_id) % LOCK_STRIPES]

    # -- queries ----------------------------------------------------------------------------

    def tier(self, session_id: str) -> int:
        if session_id in self.dram:
            return TIER_DRAM
        if session_id in self.promoter:
            return TIER_LOADING
        return TIER_SSD if session_id in self._metas else TIER_NONE

    def location(self, session_id: str) -> Location:
        meta = self._metas.get(session_id)
        if meta is None:
            return Location(session_id, TIER_NONE, 0, 0, 0.0)
        tier = self.tier(session_id)
        estimate = 0.0 if tier == TIER_DRAM else self.promoter.estimate(session_id,
                                                                        meta.num_bytes)
        return Location(session_id, tier, meta.num_bytes, meta.num_tokens, estimate)

    def lookup(self, session_id: str, lease: bool = False, lease_seconds: float = 0.0):
        """(meta or None, tier, lease id or '')."""
        check_session_id(session_id)
        self._refresh(session_id)
        with self._lock:
            meta = self._metas.get(session_id)
            if meta is None:
                return None, TIER_NONE, ""
            lease_id = ""
            if lease:
                lease_id = self.leases.acquire(session_id, time.monotonic(),
                                               lease_seconds or self.config.lease_seconds)
            return meta.copy(), self.tier(session_id), lease_id

    def release(self, lease_id: str) -> None:
        with self._lock:
            known = self.leases.release(lease_id)
            handle = self._holds.pop(lease_id, None)
            if handle is not None:
                handle.release()
        if not known:
            raise errors.not_found(f"no lease {lease_id!r} (released or expired)")

    def stats(self) -> dict:
        """Fields of bidaw.v1.StoreStats."""
        queued, running, queued_bytes = self.promoter.stats()
        with self._lock:
            in_entries = sum(self.dram.size(s) for s in self.dram)
            return dict(dram_bytes=self.dram.used, dram_capacity=self.dram.capacity,
                        dram_sessions=len(self.dram), ssd_bytes=self.ssd.used_bytes,
                        ssd_capacity=self.config.ssd_bytes, ssd_sessions=len(self.ssd.file_bytes),
                        promotions_pending=queued + running, promotions_running=running,
                        promotion_bytes_pending=queued_bytes,
                        dram_bytes_outside_entries=self.dram.used - in_entries,
                        ssd_writes_pending=self.writer.pending(),
                        ssd_read_gbps_measured=self.meter.rate / 1e9,
                        eviction_policy=self.policy.name, index=self.catalog.kind,
                        leases=len(self.leases), **vars(self.counters))

    def snapshot(self) -> list[Location]:
        with self._lock:
            return [self.location(s) for s in self._metas]

    # -- tiers ------------------------------------------------------------------------------

    def _make_room(self, need: int, keep: set[str]) -> bool:
        """Evict until a region of `need` bytes can be carved; False if it cannot be."""
        if need > self.dram.capacity:
            return False
        now = time.monotonic()
        exclude = None
        while not self.arena.fits(need):
            if exclude is None:  # leased, being written to SSD (inclusive), asked to keep, or
                # needed by a queued turn: evicting that only means reading it back from SSD
                exclude = self.leases.held(now) | keep | self.writer.keys() | self._waiting(now)
            victim = self.policy.victim(now, exclude)
            if victim is None:
                return False
            if victim not in self.dram:
                self.policy.remove(victim)
                continue
            self._drop_dram(victim)
            self.counters.dram_evictions += 1
            metrics.EVICTIONS.labels("dram").inc()
            self.events.publish(self.location(victim))
        return True

    def _waiting(self, now: float) -> set[str]:
        """Sessions whose turn is queued (arrived within a lease lifetime, not yet complete)."""
        for sid in [s for s, t in self._queued_at.items() if now - t > self.config.lease_seconds]:
            del self._queued_at[sid]
        return set(self._queued_at)

    def _drop_dram(self, session_id: str) -> None:
        if self.dram.drop(session_id):
            self.policy.remove(session_id)

    def reserve_ssd(self, session_id: str, need: int, force: bool = False) -> bool:
        """Drop the oldest SSD sessions not in use until `need` more bytes fit under the bound
        (`force`: free `need` bytes whatever the bound says: the disk itself is full). Sessions
        also in DRAM go last, with their DRAM copy (the tier stays inclusive). Under the lock."""
        if not force and self.ssd.used_bytes + need <= self.config.ssd_bytes:
            return True
        busy = self.leases.held(time.monotonic()) | self.writer.keys() | {session_id}
        order = [s for s in self._ssd_lru if s not in busy and s not in self.promoter]
        order.sort(key=lambda s: s in self.dram)  # stable: LRU within each group
        target = need if force else self.ssd.used_bytes + need - self.config.ssd_bytes
        freed = 0
        for victim in order:
            if freed >= target:
                break
            freed += self.ssd.file_bytes.get(victim, 0)
            self.forget(victim)
            self.counters.ssd_evictions += 1
            metrics.EVICTIONS.labels("ssd").inc()
        return freed >= target

    def forget(self, session_id: str, local_only: bool = False) -> None:
        """Drop a session from every tier (`local_only`: from this replica's view only)."""
        self._drop_dram(session_id)
        if not local_only:
            self.ssd.delete(session_id)
            self.catalog.delete(session_id)
        self._metas.pop(session_id, None)
        self._versions.pop(session_id, None)
        self._ssd_lru.pop(session_id, None)
        self.events.publish(Location(session_id, TIER_NONE, 0, 0, 0.0))

    def _adopt(self, entry) -> None:
        """Take a catalog entry as the session's state (start-up, or another replica wrote)."""
        sid = entry.meta.session_id
        self._drop_dram(sid)
        self._metas[sid] = entry.meta.copy()
        self._versions[sid] = entry.version
        self.ssd.set_length(sid, entry.ssd_len)
        self._ssd_lru[sid] = None
        self._ssd_lru.move_to_end(sid)

    def _refresh(self, session_id: str) -> None:
        """With a shared index: take another replica's newer write of the session."""
        if self.catalog.kind == "embedded":
            return
        version = self.catalog.version(session_id)
        with self._lock:
            if version == self._versions.get(session_id) or self.writer.busy(session_id):
                return
        entry = self.catalog.get(session_id)
        with self._lock:
            if self.writer.busy(session_id):
                return
            if entry is None:
                if session_id in self._versions:
                    self.forget(session_id, local_only=True)
                return
            if entry.version == self._versions.get(session_id):
                return
            self._adopt(entry)
            loc = self.location(session_id)
        self.events.publish(loc)

    def revert(self, session_id: str) -> None:
        """An SSD write failed: back to what is durable (under the lock)."""
        self.writer.cancel_queued(session_id)
        entry = self.catalog.get(session_id)
        if entry is None:
            self.forget(session_id, local_only=True)
            return
        self._adopt(entry)
        self.events.publish(self.location(session_id))

    # -- promotions -------------------------------------------------------------------------

    def promote(self, session_id: str) -> Location:
        """Start an SSD -> DRAM load (bounded concurrency); LoadDone is published when done."""
        check_session_id(session_id)
        self._refresh(session_id)
        with self._lock:
            loc = self.location(session_id)
            if loc.tier != TIER_SSD:
                return loc
            self.promoter.request(session_id, loc.num_bytes)
            now = self.location(session_id)
        self.events.publish(now)
        return Location(session_id, loc.tier, loc.num_bytes, loc.num_tokens,
                        now.load_estimate_s)

    def _load(self, session_id: str) -> None:
        start = time.monotonic()
        ok = False
        try:
            with self._lock:  # no room in DRAM: reading it now would only be read again later
                room = session_id in self.dram or self._make_room(
                    self.ssd.file_bytes.get(session_id, 0), keep={session_id})
            if room:
                self.open_read(session_id).release()
            ok = session_id in self.dram
        except errors.StoreError as exc:
            log.info("promotion of %r failed: %s", session_id, exc.message)
        except Exception:
            log.exception("promotion of %r failed", session_id)
        with self._lock:
            loc = self.location(session_id)
            if ok and self._promoted.get(session_id) not in self.leases:
                self._promoted[session_id] = self.leases.acquire(
                    session_id, time.monotonic(), self.config.promotion_hold_seconds)
        if loc.tier == TIER_LOADING:  # still counted as running until _load returns
            loc.tier, loc.load_estimate_s = (TIER_DRAM, 0.0) if ok else (TIER_SSD,
                                                                         loc.load_estimate_s)
        self.events.publish(loc)
        elapsed = time.monotonic() - start
        self.events.publish(LoadDone(session_id, ok, elapsed))
        metrics.PROMOTIONS.labels("ok" if ok else "failed").inc()
        metrics.PROMOTION_TIME.observe(elapsed)
        if ok:
            metrics.PROMOTION_BYTES.inc(loc.num_bytes)

    # -- awareness --------------------------------------------------------------------------

    def subscribe(self):
        return self.events.subscribe()

    def unsubscribe(self, q) -> None:
        self.events.unsubscribe(q)

    def on_arrival(self, session_id: str) -> None:
        with self._lock:
            self.counters.arrivals_observed += 1
            self._queued.append(session_id)
            self._queued_at[session_id] = time.monotonic()
            if len(self._queued) > MAX_QUEUED:
                del self._queued[:len(self._queued) - MAX_QUEUED]
            self.policy.observe_queue(list(self._queued), time.monotonic())

    def on_turn_complete(self, session_id: str, answer_tokens: int) -> None:
        with self._lock:
            self.counters.answers_observed += 1
            while session_id in self._queued:
                self._queued.remove(session_id)
            self._queued_at.pop(session_id, None)
            now = time.monotonic()
            self.policy.observe_answer(session_id, answer_tokens, now)
            self.policy.observe_queue(list(self._queued), now)

    def on_session_end(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self.leases.held(time.monotonic()) \
                    and not self.writer.busy(session_id) and session_id in self._metas:
                self.forget(session_id)

    # -- housekeeping -----------------------------------------------------------------------

    def _housekeep(self) -> None:
        while not self._stop.wait(0.5):
            self.expire_leases()

    def expire_leases(self) -> None:
        """Free the regions of read leases and prepared writes whose holder went quiet."""
        with self._lock:
            self.leases.expire(time.monotonic())
            for lease_id in [lid for lid in self._holds if lid not in self.leases]:
                self._holds.pop(lease_id).release()
            for region, (_, payload, lease_id) in list(self._prepared.items()):
                if lease_id not in self.leases:
                    del self._prepared[region]
                    payload.release(self.arena.unref)

    def close(self) -> None:
        self._stop.set()
        self._housekeeper.join(timeout=5)
        self.promoter.close()
        self.writer.close()  # queued SSD copies land before we go
        with self._lock:
            for handle in self._holds.values():
                handle.release()
            self._holds.clear()
            for _, payload, _ in self._prepared.values():
                payload.release(self.arena.unref)
            self._prepared.clear()
        self.ssd.close()
        self.catalog.close()
        self.arena.close()
