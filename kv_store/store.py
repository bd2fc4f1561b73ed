"""The store's state machine: index, DRAM and SSD tiers, leases, eviction and promotions.

The gRPC service (service.py) translates messages to these calls. One lock guards the shared
structures; disk I/O runs outside it, under a per-session lock for reads and loads, and on the
ordered writer threads for SSD writes, so a slow disk write of one session does not stall the
DRAM reads of others. Every change of a session's location is published to the Awareness
subscribers as a `Location` event. The SSD write path (durability, disk full, compaction) is in
persist.py; this file decides where bytes live.

What a WriteKV reply promises: the new KV is readable from the store (DRAM, or SSD) when the
reply comes; `durable` says whether it is also fsync'd on SSD. A writer that allows it gets the
reply once the KV is in DRAM and its SSD copy is queued (durable=false); the copy follows in order,
and until it lands the session is pinned in DRAM (inclusive tier: eviction stays a drop). If that
copy fails (disk full), the session falls back to what is durable and the next turn recomputes
the rest. Otherwise, and whenever DRAM cannot hold the KV, the reply waits for the fsync.
"""
from __future__ import annotations

import inspect
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass

from services.gen import common_pb2

from . import errors
from .bandwidth import BandwidthCap, BandwidthMeter
from .buffers import Payload, ReadHandle
from .catalog import make_catalog
from .config import StoreConfig
from .dram_tier import DramTier, ShmPiece
from .events import EventHub, LoadDone, Location
from .eviction.registry import NEEDS_FUTURE, policy_class
from .leases import Leases
from .persist import Persister
from .promoter import Promoter
from .session_meta import SessionMeta
from .shm_arena import Segment, ShmArena
from .ssd_tier import SsdTier
from .ssd_writer import OrderedWriter

log = logging.getLogger("bidaw.kv_store")

TIER_NONE, TIER_DRAM, TIER_SSD, TIER_LOADING = (common_pb2.TIER_NONE, common_pb2.TIER_DRAM,
                                                common_pb2.TIER_SSD, common_pb2.TIER_LOADING)
MAX_SESSION_ID = 256
LOCK_STRIPES = 1024
MAX_QUEUED = 100_000  # arrivals remembered for the look-ahead; a lost completion must not leak


@dataclass
class StoreCounters:
    dram_hits: int = 0
    ssd_hits: int = 0
    misses: int = 0
    ssd_bytes_read: int = 0
    ssd_bytes_written: int = 0
    kv_bytes_written: int = 0
    dram_evictions: int = 0
    ssd_evictions: int = 0
    answers_observed: int = 0
    arrivals_observed: int = 0
    corrupt_records: int = 0
    ssd_write_failures: int = 0
    shm_reads: int = 0
    shm_writes: int = 0


def check_session_id(session_id: str) -> None:
    if not session_id:
        raise errors.invalid("session_id is empty")
    if len(session_id.encode()) > MAX_SESSION_ID:
        raise errors.invalid(f"session_id longer than {MAX_SESSION_ID} bytes")


def make_store_policy(config: StoreConfig):
    """The eviction policy by name, told the DRAM capacity when it wants to know it."""
    if config.eviction in NEEDS_FUTURE:
        raise ValueError(f"--eviction {config.eviction} needs the future: simulator only")
    cls = policy_class(config.eviction)
    params = inspect.signature(cls).parameters
    kwargs = {}
    if "capacity_bytes" in params:
        kwargs["capacity_bytes"] = max(config.dram_bytes, 1)
    if "watermark_bytes" in params:
        kwargs["watermark_bytes"] = max(config.dram_bytes // 100, 1)
    return cls(**kwargs)


class KVStore:
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
        self._prepared: dict[str, tuple[str, Payload, str]] = {}  # region -> (session,
        self._queued: list[str] = []  # sessions of queued requests    payload, lease)
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

    # -- reads ------------------------------------------------------------------------------

    def open_read(self, session_id: str, max_tokens: int = 0) -> ReadHandle:
        """The session's KV (its first `max_tokens` tokens if > 0) and the tier serving it; a
        read from SSD brings the session into DRAM when it fits. Call `release` when done."""
        check_session_id(session_id)
        if max_tokens < 0:
            raise errors.invalid("max_tokens is negative")
        self._refresh(session_id)
        while True:
            handle = self._read_dram(session_id, max_tokens)
            if handle is not None:
                return handle
            with self._session_lock(session_id):
                handle = self._read_dram(session_id, max_tokens)  # loaded while we waited
                if handle is not None:
                    return handle
                if not self.writer.busy(session_id):
                    return self._load_from_ssd(session_id, max_tokens, admit=True)
            self.writer.wait(session_id)  # its SSD copy is on the way: read it once it is

    def _read_dram(self, session_id: str, max_tokens: int) -> ReadHandle | None:
        with self._lock:
            meta = self._metas.get(session_id)
            if meta is None:
                self.counters.misses += 1
                raise errors.not_found(f"no KV stored for session {session_id!r}")
            if session_id not in self.dram:
                return None
            want = meta.num_tokens if max_tokens == 0 else min(max_tokens, meta.num_tokens)
            self.counters.dram_hits += 1
            self.policy.touch(session_id, self.dram.size(session_id), time.monotonic())
            served = SessionMeta(session_id, meta.format, meta.bytes_per_token, meta.model,
                                 meta.token_ids[:want])
            pieces = self.dram.pieces(session_id, served.num_bytes)
            return ReadHandle(served, TIER_DRAM, shm=pieces, arena=self.arena,
                              on_release=lambda: self._release_pieces(pieces))

    def _load_from_ssd(self, session_id: str, max_tokens: int, admit: bool) -> ReadHandle:
        """Read the session file (verified) into a new DRAM segment, or aligned memory when
        DRAM has no room; the caller holds the session lock."""
        for _ in range(3):
            got = self.persister.read_session(session_id, admit)
            if got is not None:
                break
        else:
            raise errors.unavailable(f"session {session_id!r} kept changing while read")
        result, segment, buffer, version = got
        log_ = result.log
        with self._lock:
            if log_.meta is None:
                self.counters.misses += 1
                if segment is not None:
                    self.arena.unref(segment)
                raise errors.not_found(f"KV of session {session_id!r} failed its checksum "
                                       "and was dropped; recompute")
            self.counters.ssd_hits += 1
            self.counters.ssd_bytes_read += result.valid_end
            if session_id in self._ssd_lru:
                self._ssd_lru.move_to_end(session_id)
            served = log_.meta.copy()
            if segment is not None and self._versions.get(session_id) == version \
                    and not self.writer.busy(session_id):
                self._drop_dram(session_id)
                self.dram.put(session_id, [ShmPiece(segment, p.offset, p.length)
                                           for p in log_.pieces])
                self.policy.admit(session_id, log_.meta.num_bytes, time.monotonic())
            log_.cut(served.num_tokens if max_tokens == 0 else max_tokens)
            served.token_ids = log_.meta.token_ids
            if segment is not None:
                pieces = [ShmPiece(self.arena.ref(segment), p.offset, p.length)
                          for p in log_.pieces]
                self.arena.unref(segment)  # the creator's reference
                handle = ReadHandle(served, TIER_SSD, shm=pieces, arena=self.arena,
                                    on_release=lambda: self._release_pieces(pieces))
            else:
                handle = ReadHandle(served, TIER_SSD, buffer=buffer,
                                    spans=[(p.offset, p.length) for p in log_.pieces])
            loc = self.location(session_id)
        self.events.publish(loc)
        return handle

    def release_segment(self, segment: Segment) -> None:
        with self._lock:
            self.arena.unref(segment)

    def _release_pieces(self, pieces: list[ShmPiece]) -> None:
        with self._lock:
            self.dram.release(pieces)

    def open_shm_read(self, session_id: str, max_tokens: int,
                      lease_seconds: float) -> tuple[ReadHandle, str]:
        """A read whose bytes stay in shared memory for a co-located worker, under a lease that
        keeps its regions until released or expired."""
        handle = self.open_read(session_id, max_tokens)
        if handle.buffer is not None:
            handle.release()
            raise errors.precondition(f"KV of session {session_id!r} does not fit in shared "
                                      "memory now; read it over the gRPC stream")
        with self._lock:
            lease_id = self.leases.acquire(session_id, time.monotonic(),
                                           lease_seconds or self.config.lease_seconds, pin=False)
            self._holds[lease_id] = handle
            self.counters.shm_reads += 1
        return handle, lease_id

    # -- writes -----------------------------------------------------------------------------

    def new_payload(self, session_id: str, start_token: int, nbytes: int) -> Payload:
        """Memory for a write's bytes: a DRAM segment when the tier will keep them."""
        with self._lock:
            segment = self._dram_segment(session_id, start_token, nbytes)
        return Payload(nbytes, self.arena, segment) if segment else Payload(nbytes)

    def prepare_shm_write(self, session_id: str, start_token: int, nbytes: int,
                          lease_seconds: float) -> Segment:
        """A region for a co-located worker to write a turn's KV into; WriteKV names it."""
        check_session_id(session_id)
        if nbytes <= 0:
            raise errors.invalid("num_bytes must be positive")
        with self._lock:
            segment = self._dram_segment(session_id, start_token, nbytes)
            if segment is None:
                raise errors.exhausted("no room in shared memory for this write now; send it "
                                       "over the gRPC stream")
            lease_id = self.leases.acquire(session_id, time.monotonic(),
                                           lease_seconds or self.config.lease_seconds, pin=False)
            self._prepared[segment.name] = (session_id, Payload(nbytes, self.arena, segment),
                                            lease_id)
            return segment

    def take_prepared(self, region: str, session_id: str, nbytes: int) -> Payload:
        with self._lock:
            entry = self._prepared.pop(region, None)
            if entry is None:
                raise errors.precondition(f"no prepared region {region!r} (expired?)")
            owner, payload, lease_id = entry
            self.leases.release(lease_id)
            if owner != session_id or payload.nbytes != nbytes:
                payload.release(self.arena.unref)
                raise errors.invalid(f"region {region!r} was prepared for {payload.nbytes} "
                                     f"bytes of session {owner!r}")
            self.counters.shm_writes += 1
            return payload

    def _dram_segment(self, session_id: str, start_token: int, nbytes: int) -> Segment | None:
        """A new segment when the write's bytes will extend or start a DRAM entry and room can
        be made for them (under the lock)."""
        if start_token != 0 and session_id not in self.dram:
            return None
        if nbytes <= 0 or not self._make_room(nbytes, keep={session_id}):
            return None
        return self.arena.create(nbytes)

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, payload: Payload,
              wait_durable: bool = True) -> tuple[Location, bool]:
        """Store tokens [start_token, start_token+len(token_ids)) from `payload` (taken over).
        Returns the session's location and whether the write is durable on SSD."""
        try:
            self._check_write(session_id, format, bytes_per_token, token_ids, payload.nbytes)
            self._refresh(session_id)
        except errors.StoreError:
            self.release_payload(payload)
            raise
        with self._session_lock(session_id):
            with self._lock:
                try:
                    base, same = self._write_base(session_id, start_token, format,
                                                  bytes_per_token, model)
                except errors.StoreError:
                    self.release_payload(payload)
                    raise
                meta = SessionMeta(session_id, format, bytes_per_token, model,
                                   base.token_ids[:start_token] + list(token_ids))
                in_dram = self._apply_to_dram(session_id, same, start_token * bytes_per_token,
                                              payload)
                self._metas[session_id] = meta
                self._ssd_lru[session_id] = None
                self._ssd_lru.move_to_end(session_id)
                fut = self.writer.submit(
                    session_id,
                    lambda: self.persister.persist(session_id, start_token, list(token_ids),
                                                   format, bytes_per_token, model, payload),
                    on_cancel=lambda: self.release_payload(payload))
                loc = self.location(session_id)
            self.events.publish(loc)
            if not wait_durable and in_dram:
                return loc, False
            self._wait(fut)
            with self._lock:
                return self.location(session_id), True

    @staticmethod
    def _check_write(session_id: str, format: int, bytes_per_token: int, token_ids: list[int],
                     nbytes: int) -> None:
        check_session_id(session_id)
        if format not in (common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6):
            raise errors.invalid("header.format must be KV_FORMAT_KV or KV_FORMAT_TENSOR6")
        if bytes_per_token <= 0:
            raise errors.invalid("header.bytes_per_token must be positive")
        if not token_ids:
            raise errors.invalid("header carries no tokens")
        if nbytes != len(token_ids) * bytes_per_token:
            raise errors.invalid(f"got {nbytes} bytes of KV, header promises "
                                 f"{len(token_ids)} tokens x {bytes_per_token} bytes")

    def _write_base(self, session_id: str, start_token: int, format: int, bytes_per_token: int,
                    model: str) -> tuple[SessionMeta, bool]:
        """The state a write builds on, and whether it extends the stored entry."""
        old = self._metas.get(session_id)
        if old is not None and not old.compatible(format, bytes_per_token, model) \
                and start_token > 0:
            raise errors.precondition(f"session {session_id!r} holds KV of another model or "
                                      "format; write from start_token 0 to replace it")
        if old is None or start_token == 0:
            base = SessionMeta(session_id, format, bytes_per_token, model, [])
        else:
            base = old
        if start_token > base.num_tokens:
            raise errors.invalid(f"start_token {start_token} leaves a gap: session "
                                 f"{session_id!r} holds {base.num_tokens} tokens")
        return base, base is old

    def _apply_to_dram(self, session_id: str, same_entry: bool, offset: int,
                       payload: Payload) -> bool:
        """Put the write's segment into the session's DRAM entry; True if the entry holds the
        whole session afterwards."""
        segment = payload.segment
        if segment is None:
            self._drop_dram(session_id)  # DRAM could not take the new bytes: SSD keeps it all
            return False
        piece = ShmPiece(segment, 0, payload.nbytes)
        now = time.monotonic()
        if same_entry and session_id in self.dram:
            self.dram.write_at(session_id, offset, piece)
            self.policy.touch(session_id, self.dram.size(session_id), now)
            return True
        self._drop_dram(session_id)
        if offset == 0:
            self.dram.put(session_id, [piece])
            self.policy.admit(session_id, payload.nbytes, now)
            return True
        return False

    def _wait(self, fut: Future) -> None:
        try:
            fut.result()
        except CancelledError:
            raise errors.aborted("an earlier write of this session failed, so this one was "
                                 "dropped; look the session up and write again") from None

    def release_payload(self, payload: Payload) -> None:
        with self._lock:
            payload.release(self.arena.unref)

    # -- tiers ------------------------------------------------------------------------------

    def _make_room(self, need: int, keep: set[str]) -> bool:
        """Evict until a region of `need` bytes can be carved; False if it cannot be."""
        if need > self.dram.capacity:
            return False
        now = time.monotonic()
        exclude = None
        while not self.arena.fits(need):
            if exclude is None:  # leased, being written to SSD (inclusive), or asked to keep
                exclude = self.leases.held(now) | keep | self.writer.keys()
            victim = self.policy.victim(now, exclude)
            if victim is None:
                return False
            if victim not in self.dram:
                self.policy.remove(victim)
                continue
            self._drop_dram(victim)
            self.counters.dram_evictions += 1
            self.events.publish(self.location(victim))
        return True

    def _drop_dram(self, session_id: str) -> None:
        if self.dram.drop(session_id):
            self.policy.remove(session_id)

    def reserve_ssd(self, session_id: str, need: int, force: bool = False) -> bool:
        """Drop the oldest SSD sessions not in use until `need` more bytes fit under the bound
        (`force`: free `need` bytes whatever the bound says: the disk itself is full). Sessions
        also in DRAM go last, with their DRAM copy (the tier stays inclusive). Under the lock."""
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
            self.open_read(session_id).release()
            ok = session_id in self.dram
        except errors.StoreError as exc:
            log.info("promotion of %r failed: %s", session_id, exc.message)
        except Exception:
            log.exception("promotion of %r failed", session_id)
        with self._lock:
            loc = self.location(session_id)
        if loc.tier == TIER_LOADING:  # still counted as running until _load returns
            loc.tier, loc.load_estimate_s = (TIER_DRAM, 0.0) if ok else (TIER_SSD,
                                                                         loc.load_estimate_s)
        self.events.publish(loc)
        self.events.publish(LoadDone(session_id, ok, time.monotonic() - start))

    # -- awareness --------------------------------------------------------------------------

    def subscribe(self):
        return self.events.subscribe()

    def unsubscribe(self, q) -> None:
        self.events.unsubscribe(q)

    def on_arrival(self, session_id: str) -> None:
        with self._lock:
            self.counters.arrivals_observed += 1
            self._queued.append(session_id)
            if len(self._queued) > MAX_QUEUED:
                del self._queued[:len(self._queued) - MAX_QUEUED]
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
