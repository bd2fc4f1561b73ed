"""The store's read paths: from DRAM, from SSD into DRAM (a load), and the co-located read
whose bytes stay in shared memory under a lease (held here until released or expired), and the
DRAM pins of promoted sessions (until the turn they were loaded for reads them)."""
from __future__ import annotations

import threading
import time

from kv_store import errors
from kv_store.events import EventHub
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.session_index import SessionIndex
from kv_store.session_meta import SessionMeta
from kv_store.store_state import SessionLocks, StoreCounters, Tier, check_session_id
from kv_store.tier_space import TierSpace
from kv_store.tiers.buffers import ReadHandle
from kv_store.tiers.dram import DramTier, ShmPiece
from kv_store.tiers.scatter import Layout
from kv_store.tiers.shm_arena import Segment
from kv_store.tiers.ssd_writer import OrderedWriter


class ReadPath:
    def __init__(self, index: SessionIndex, dram: DramTier, space: TierSpace,
                 persister: Persister, writer: OrderedWriter, leases: Leases,
                 counters: StoreCounters, events: EventHub, lock: threading.RLock,
                 session_locks: SessionLocks, lease_seconds: float):
        self.index = index
        self.dram = dram
        self.space = space
        self.persister = persister
        self.writer = writer
        self.leases = leases
        self.counters = counters
        self.events = events
        self._lock = lock
        self._session_lock = session_locks
        self.lease_seconds = lease_seconds
        self._holds: dict[str, ReadHandle] = {}  # shm read lease -> the regions it keeps
        # session -> pin taken when its promotion landed: the load was asked for by a queued
        # turn, so the KV stays in DRAM until that turn reads it (or the pin expires).
        self._promoted: dict[str, str] = {}

    def open_read(self, session_id: str, max_tokens: int = 0) -> ReadHandle:
        """The session's KV (its first `max_tokens` tokens if > 0) and the tier serving it; a
        read from SSD brings the session into DRAM when it fits. Call `release` when done."""
        check_session_id(session_id)
        if max_tokens < 0:
            raise errors.invalid("max_tokens is negative")
        self.index.refresh(session_id)
        with self._lock:  # the turn a promotion was for is reading: its pin has done its job
            hold = self._promoted.pop(session_id, None)
            if hold is not None:
                self.leases.release(hold)
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
            meta = self.index.metas.get(session_id)
            if meta is None:
                self.counters.misses += 1
                raise errors.not_found(f"no KV stored for session {session_id!r}")
            if session_id not in self.dram:
                return None
            want = meta.num_tokens if max_tokens == 0 else min(max_tokens, meta.num_tokens)
            self.counters.dram_hits += 1
            self.dram.touch(session_id, time.monotonic())
            served = SessionMeta(session_id, meta.format, meta.bytes_per_token, meta.model,
                                 meta.token_ids[:want])
            pieces = self.dram.pieces(session_id, served.num_bytes)
            return ReadHandle(served, Tier.DRAM, shm=pieces, arena=self.dram.arena,
                              on_release=lambda: self.space.release_pieces(pieces))

    def _load_from_ssd(self, session_id: str, max_tokens: int, admit: bool) -> ReadHandle:
        """Read the session file (verified) into a new DRAM segment, or aligned memory when
        DRAM has no room; the caller holds the session lock."""
        for _ in range(3):
            got = self.persister.read_session(session_id, admit)
            if got is not None:
                break
        else:
            raise errors.unavailable(f"session {session_id!r} kept changing while read")
        result, segments, buffer, version = got
        log_ = result.log
        with self._lock:
            if log_.meta is None:
                self.counters.misses += 1
                if segments:
                    self.space.release_segments(segments)
                raise errors.not_found(f"KV of session {session_id!r} failed its checksum "
                                       "and was dropped; recompute")
            self.counters.ssd_hits += 1
            self.counters.ssd_bytes_read += result.valid_end
            self.index.touch_ssd(session_id)
            served = log_.meta.copy()
            if segments and self.index.versions.get(session_id) == version \
                    and not self.writer.busy(session_id):
                self.dram.put(session_id, _image_pieces(segments, log_.pieces), time.monotonic())
            log_.cut(served.num_tokens if max_tokens == 0 else max_tokens)
            served.token_ids = log_.meta.token_ids
            if segments:
                pieces = _image_pieces(segments, log_.pieces)
                for piece in pieces:
                    self.dram.arena.ref(piece.segment)
                self.space.release_segments(segments)  # the creators' references
                handle = ReadHandle(served, Tier.SSD, shm=pieces, arena=self.dram.arena,
                                    on_release=lambda: self.space.release_pieces(pieces))
            else:
                handle = ReadHandle(served, Tier.SSD, buffer=buffer,
                                    spans=[(p.offset, p.length) for p in log_.pieces])
            loc = self.index.location(session_id)
        self.events.publish(loc)
        return handle

    def open_shm_read(self, session_id: str, max_tokens: int,
                      lease_seconds: float) -> tuple[ReadHandle, str]:
        """A read whose bytes stay in shared memory for a co-located worker, under a lease that
        keeps its regions until released or expired."""
        with self._lock:
            need = 0 if session_id in self.dram else self.index.ssd.file_bytes.get(session_id, 0)
            too_big = need > self.dram.capacity
            # Make room before reading: a read that lands outside shared memory would be read
            # from the SSD a second time by the stream the worker falls back to.
            no_room = not too_big and need > 0 and not self.space.make_room(need,
                                                                            keep={session_id})
        if too_big or no_room:  # say so before reading it: the stream will read it once
            raise errors.precondition(
                f"KV of session {session_id!r} is larger than shared memory; read it over the "
                "gRPC stream" if too_big else f"no room in shared memory for the KV of session "
                f"{session_id!r} now; read it over the gRPC stream")
        handle = self.open_read(session_id, max_tokens)
        if handle.buffer is not None:
            handle.release()
            raise errors.precondition(f"KV of session {session_id!r} does not fit in shared "
                                      "memory now; read it over the gRPC stream")
        with self._lock:
            lease_id = self.leases.acquire(session_id, time.monotonic(),
                                           lease_seconds or self.lease_seconds, pin=False)
            self._holds[lease_id] = handle
            self.counters.shm_reads += 1
        return handle, lease_id

    # -- holds (under the store lock) -------------------------------------------------------

    def hold_promoted(self, session_id: str, seconds: float) -> None:
        """Pin a promoted session in DRAM until its turn reads it, at most `seconds`."""
        if self._promoted.get(session_id) not in self.leases:
            self._promoted[session_id] = self.leases.acquire(session_id, time.monotonic(),
                                                             seconds)

    def release_hold(self, lease_id: str) -> None:
        handle = self._holds.pop(lease_id, None)
        if handle is not None:
            handle.release()

    def drop_expired_holds(self) -> None:
        for lease_id in [lid for lid in self._holds if lid not in self.leases]:
            self._holds.pop(lease_id).release()

    def close(self) -> None:
        for handle in self._holds.values():
            handle.release()
        self._holds.clear()


def _image_pieces(segments: list[Segment], pieces) -> list[ShmPiece]:
    """File-image ranges (`pieces`) as pieces of the segments holding the image, in order."""
    image = Layout([s.span for s in segments])
    return [ShmPiece(segments[i], local, take)
            for p in pieces for i, local, take in image.spans(p.offset, p.offset + p.length)]
