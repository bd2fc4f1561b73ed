"""The store's state machine: index, DRAM and SSD tiers, leases, eviction and promotions.

The gRPC service (service.py) translates messages to these calls. One lock guards the shared
structures; SSD I/O runs outside it under a per-session lock, so a slow disk write of one session
does not stall DRAM reads of others. Every change of a session's location is published to the
Awareness subscribers as a `Location` event.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from services.gen import common_pb2

from . import errors
from .config import StoreConfig
from .dram_tier import DramTier
from .eviction.registry import make_policy
from .leases import Leases
from .session_meta import SessionMeta
from .ssd_record import CorruptRecord
from .ssd_tier import SsdTier

log = logging.getLogger("bidaw.kv_store")

TIER_NONE, TIER_DRAM, TIER_SSD, TIER_LOADING = (common_pb2.TIER_NONE, common_pb2.TIER_DRAM,
                                                common_pb2.TIER_SSD, common_pb2.TIER_LOADING)
MAX_SESSION_ID = 256


@dataclass
class Location:
    session_id: str
    tier: int
    num_bytes: int
    num_tokens: int
    load_estimate_s: float


@dataclass
class LoadDone:
    session_id: str
    ok: bool
    load_s: float


@dataclass
class StoreCounters:
    dram_hits: int = 0
    ssd_hits: int = 0
    misses: int = 0
    ssd_bytes_read: int = 0
    ssd_bytes_written: int = 0
    dram_evictions: int = 0
    ssd_evictions: int = 0
    answers_observed: int = 0
    arrivals_observed: int = 0


def check_session_id(session_id: str) -> None:
    if not session_id:
        raise errors.invalid("session_id is empty")
    if len(session_id.encode()) > MAX_SESSION_ID:
        raise errors.invalid(f"session_id longer than {MAX_SESSION_ID} bytes")


class KVStore:
    def __init__(self, config: StoreConfig):
        self.config = config
        self.dram = DramTier(config.dram_bytes)
        self.ssd = SsdTier(config.data_dir)
        self.policy = make_policy(config.eviction)
        self.leases = Leases()
        self.counters = StoreCounters()
        self._metas: dict[str, SessionMeta] = {}
        self._ssd_lru: OrderedDict[str, None] = OrderedDict()  # SSD tier order, oldest first
        self._loading: set[str] = set()
        self._lock = threading.RLock()
        self._session_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._subscribers: list[queue.Queue] = []
        self._queued: list[str] = []  # sessions of queued requests, soonest first
        self._promoter = ThreadPoolExecutor(max_workers=config.promote_concurrency,
                                            thread_name_prefix="promote")
        for meta in self.ssd.scan():
            self._metas[meta.session_id] = meta
            self._ssd_lru[meta.session_id] = None
        log.info("index rebuilt from %s: %d sessions, %d bytes", config.data_dir,
                 len(self._metas), self.ssd.used_bytes)

    # -- queries ----------------------------------------------------------------------------

    def tier(self, session_id: str) -> int:
        if session_id in self.dram:
            return TIER_DRAM
        if session_id in self._loading:
            return TIER_LOADING
        return TIER_SSD if session_id in self._metas else TIER_NONE

    def location(self, session_id: str) -> Location:
        meta = self._metas.get(session_id)
        tier = self.tier(session_id)
        if meta is None:
            return Location(session_id, TIER_NONE, 0, 0, 0.0)
        estimate = 0.0 if tier == TIER_DRAM else meta.num_bytes / (self.config.ssd_read_gbps * 1e9)
        return Location(session_id, tier, meta.num_bytes, meta.num_tokens, estimate)

    def lookup(self, session_id: str, lease: bool = False, lease_seconds: float = 0.0):
        """(meta or None, tier, lease id or '')."""
        check_session_id(session_id)
        with self._lock:
            meta = self._metas.get(session_id)
            if meta is None:
                return None, TIER_NONE, ""
            lease_id = ""
            if lease:
                lease_id = self.leases.acquire(session_id, time.monotonic(),
                                               lease_seconds or self.config.lease_seconds)
            return SessionMeta(meta.session_id, meta.format, meta.bytes_per_token, meta.model,
                               list(meta.token_ids)), self.tier(session_id), lease_id

    def release(self, lease_id: str) -> None:
        with self._lock:
            if not self.leases.release(lease_id):
                raise errors.not_found(f"no lease {lease_id!r} (released or expired)")

    def stats(self) -> dict:
        """Fields of bidaw.v1.StoreStats."""
        with self._lock:
            return dict(dram_bytes=self.dram.used, dram_capacity=self.dram.capacity,
                        dram_sessions=len(self.dram), ssd_bytes=self.ssd.used_bytes,
                        ssd_capacity=self.config.ssd_bytes, ssd_sessions=len(self.ssd.file_bytes),
                        promotions_pending=len(self._loading), eviction_policy=self.policy.name,
                        leases=len(self.leases), **vars(self.counters))

    def snapshot(self) -> list[Location]:
        with self._lock:
            return [self.location(s) for s in self._metas]

    # -- reads ------------------------------------------------------------------------------

    def read(self, session_id: str, max_tokens: int = 0) -> tuple[SessionMeta, bytes, int]:
        """The session's KV bytes and the tier they came from; an SSD read promotes to DRAM."""
        check_session_id(session_id)
        if max_tokens < 0:
            raise errors.invalid("max_tokens is negative")
        with self._session_locks[session_id]:
            with self._lock:
                meta = self._metas.get(session_id)
                if meta is None:
                    self.counters.misses += 1
                    raise errors.not_found(f"no KV stored for session {session_id!r}")
                want = meta.num_tokens if max_tokens == 0 else min(max_tokens, meta.num_tokens)
                data = self.dram.get(session_id)
                if data is not None:
                    self.counters.dram_hits += 1
                    self.policy.touch(session_id, len(data), time.monotonic())
                    return meta, bytes(data[:want * meta.bytes_per_token]), TIER_DRAM
            payload = self._read_ssd(meta)
            with self._lock:
                self.counters.ssd_hits += 1
                self._admit(session_id, payload)
            return meta, payload[:want * meta.bytes_per_token], TIER_SSD

    def _read_ssd(self, meta: SessionMeta) -> bytes:
        try:
            payload = self.ssd.read(meta)
        except (CorruptRecord, OSError) as exc:
            log.warning("dropping session %r: %s", meta.session_id, exc)
            with self._lock:
                self._forget(meta.session_id)
                self.counters.misses += 1
            raise errors.not_found(f"KV of session {meta.session_id!r} failed its checksum "
                                   "and was dropped; recompute") from None
        with self._lock:
            self.counters.ssd_bytes_read += len(payload)
            self._ssd_lru.move_to_end(meta.session_id)
        return payload

    # -- writes -----------------------------------------------------------------------------

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, payload: bytes) -> Location:
        """Store tokens [start_token, start_token+len(token_ids)); durable on SSD on return."""
        check_session_id(session_id)
        if format not in (common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6):
            raise errors.invalid("header.format must be KV_FORMAT_KV or KV_FORMAT_TENSOR6")
        if bytes_per_token <= 0:
            raise errors.invalid("header.bytes_per_token must be positive")
        if not token_ids:
            raise errors.invalid("header carries no tokens")
        if len(payload) != len(token_ids) * bytes_per_token:
            raise errors.invalid(f"got {len(payload)} bytes of KV, header promises "
                                 f"{len(token_ids)} tokens x {bytes_per_token} bytes")
        with self._session_locks[session_id]:
            with self._lock:
                old = self._metas.get(session_id)
                if old is not None and not old.compatible(format, bytes_per_token, model) \
                        and start_token > 0:
                    raise errors.precondition(
                        f"session {session_id!r} holds KV of another model or format; "
                        "write from start_token 0 to replace it")
                if old is None or start_token == 0:
                    base = SessionMeta(session_id, format, bytes_per_token, model, [])
                else:
                    base = old
                if start_token > base.num_tokens:
                    raise errors.invalid(f"start_token {start_token} leaves a gap: session "
                                         f"{session_id!r} holds {base.num_tokens} tokens")
                kept = self.dram.get(session_id) if base is old else None
                kept = bytes(kept) if kept is not None and start_token < base.num_tokens else None
                self._reserve_ssd(session_id, len(payload) + 4096)
            try:
                written = self.ssd.append(base, start_token, token_ids, payload, kept)
            except OSError as exc:
                raise errors.exhausted(f"SSD tier write failed: {exc.strerror or exc}") from None
            with self._lock:
                meta = SessionMeta(session_id, format, bytes_per_token, model,
                                   base.token_ids[:start_token] + list(token_ids))
                self._metas[session_id] = meta
                self._ssd_lru[session_id] = None
                self._ssd_lru.move_to_end(session_id)
                self.counters.ssd_bytes_written += written
                self._update_dram(session_id, base is old, start_token * bytes_per_token,
                                  payload)
                loc = self.location(session_id)
            self._publish(loc)
            return loc

    def _update_dram(self, session_id: str, same_entry: bool, offset: int,
                     payload: bytes) -> None:
        now = time.monotonic()
        if session_id in self.dram and same_entry:
            new_size = offset + len(payload)
            grow = new_size - self.dram.size(session_id)
            if grow <= 0 or self._make_room(grow, keep={session_id}):
                self.dram.write_at(session_id, offset, payload)
                self.policy.touch(session_id, new_size, now)
                return
            self._drop_dram(session_id)  # no longer fits: SSD keeps it
            return
        self._drop_dram(session_id)
        if offset == 0:
            self._admit(session_id, payload)

    # -- tiers ------------------------------------------------------------------------------

    def _admit(self, session_id: str, payload: bytes) -> bool:
        """Put a whole session into DRAM if room can be made; True if it is there."""
        if session_id in self.dram:
            return True
        if len(payload) > self.dram.capacity or not self._make_room(len(payload), {session_id}):
            return False
        self.dram.put(session_id, payload)
        self.policy.admit(session_id, len(payload), time.monotonic())
        return True

    def _make_room(self, need: int, keep: set[str]) -> bool:
        now = time.monotonic()
        exclude = self.leases.held(now) | keep
        while self.dram.free() < need:
            victim = self.policy.victim(now, exclude)
            if victim is None:
                return False
            self._drop_dram(victim)
            self.counters.dram_evictions += 1
            self._publish(self.location(victim))
        return True

    def _drop_dram(self, session_id: str) -> None:
        if self.dram.drop(session_id):
            self.policy.remove(session_id)

    def _reserve_ssd(self, session_id: str, need: int) -> None:
        """Drop the oldest SSD sessions (not leased) until `need` more bytes fit."""
        held = self.leases.held(time.monotonic()) | {session_id}
        candidates = iter([s for s in self._ssd_lru if s not in held])
        while self.ssd.used_bytes + need > self.config.ssd_bytes:
            victim = next(candidates, None)
            if victim is None:
                raise errors.exhausted("SSD tier is full of leased KV; retry later")
            self._forget(victim)
            self.counters.ssd_evictions += 1

    def _forget(self, session_id: str) -> None:
        """Drop a session from every tier."""
        self._drop_dram(session_id)
        self.ssd.delete(session_id)
        self._metas.pop(session_id, None)
        self._ssd_lru.pop(session_id, None)
        self._publish(Location(session_id, TIER_NONE, 0, 0, 0.0))

    # -- promotions -------------------------------------------------------------------------

    def promote(self, session_id: str) -> Location:
        """Start an SSD -> DRAM load (bounded concurrency); LoadDone is published when done."""
        check_session_id(session_id)
        with self._lock:
            loc = self.location(session_id)
            if loc.tier != TIER_SSD:
                return loc
            self._loading.add(session_id)
        self._publish(self.location(session_id))
        self._promoter.submit(self._load, session_id)
        return loc

    def _load(self, session_id: str) -> None:
        start = time.monotonic()
        ok = False
        try:
            self.read(session_id)
            ok = session_id in self.dram
        except errors.StoreError as exc:
            log.info("promotion of %r failed: %s", session_id, exc.message)
        finally:
            with self._lock:
                self._loading.discard(session_id)
                loc = self.location(session_id)
        self._publish(loc)
        self._publish(LoadDone(session_id, ok, time.monotonic() - start))

    # -- awareness --------------------------------------------------------------------------

    def subscribe(self) -> queue.Queue:
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def _publish(self, event) -> None:
        with self._lock:
            for q in self._subscribers:
                q.put(event)

    def on_arrival(self, session_id: str) -> None:
        with self._lock:
            self.counters.arrivals_observed += 1
            self._queued.append(session_id)
            self.policy.observe_queue(list(self._queued), time.monotonic())

    def on_turn_complete(self, session_id: str, answer_tokens: int) -> None:
        with self._lock:
            self.counters.answers_observed += 1
            if session_id in self._queued:
                self._queued.remove(session_id)
            now = time.monotonic()
            self.policy.observe_answer(session_id, answer_tokens, now)
            self.policy.observe_queue(list(self._queued), now)

    def on_session_end(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self.leases.held(time.monotonic()):
                self._forget(session_id)

    def close(self) -> None:
        self._promoter.shutdown(wait=True, cancel_futures=True)
