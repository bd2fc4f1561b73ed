"""The store's read paths: from DRAM, from SSD into DRAM (a load), and the co-located read
whose bytes stay in shared memory under a lease (held here until released or expired), and the
DRAM pins of promoted sessions (until the turn they were loaded for reads them)."""
from __future__ import annotations

import threading
import time

from kv_store import errors
from kv_store.end_first import HANDED_OVER, EndFirst
from kv_store.path_parts import PathParts
from kv_store.events import EventHub
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.session_index import SessionIndex
from kv_store.session_meta import SessionMeta
from kv_store.store_state import SessionLocks, StoreCounters, Tier, check_session_id
from kv_store.tier_space import TierSpace
from kv_store.tiers.buffers import ReadHandle
from kv_store.tiers.dram import DramTier, ShmPiece
from kv_store.tiers.read_gate import ReadStopped
from kv_store.tiers.scatter import Layout
from kv_store.tiers.shm_arena import Segment
from kv_store.tiers.ssd_writer import OrderedWriter


class ReadPath:
    def __init__(self, parts: PathParts):
        self.parts = parts
        self._holds: dict[str, ReadHandle] = {}  # shm read lease -> the regions it keeps
        # session -> pin taken when its promotion landed: the load was asked for by a queued
        # turn, so the KV stays in DRAM until that turn reads it (or the pin expires).
        self._promoted: dict[str, str] = {}
        self.ends = EndFirst(parts, self._read_part, parts.index.promoter.landed)

    def open_read(self, session_id: str, max_tokens: int = 0, speculative: bool = False,
                  start_token: int = 0) -> ReadHandle:
        """The session's KV (its first `max_tokens` tokens if > 0; from `start_token` on) and
        the tier serving it; a whole read from SSD brings the session into DRAM when it fits.
        Call `release` when done. `speculative`: the Prefetcher's read, which yields the disk
        to demand reads; a demand read of the session it is reading takes that read over and
        waits for it."""
        check_session_id(session_id)
        if max_tokens < 0:
            raise errors.invalid("max_tokens is negative")
        if start_token < 0:
            raise errors.invalid("start_token is negative")
        if speculative:
            return self._open_read(session_id, max_tokens, True, start_token)
        with self.parts.persister.ssd.gate.wanted(session_id):
            return self._open_read(session_id, max_tokens, False, start_token)

    def _open_read(self, session_id: str, max_tokens: int, speculative: bool,
                   start_token: int) -> ReadHandle:
        self.parts.index.refresh(session_id)
        with self.parts.lock:  # the turn a promotion was for is reading: its pin has done its job
            hold = self._promoted.pop(session_id, None)
            if hold is not None:
                self.parts.leases.release(hold)
        while True:
            handle = self._read_dram(session_id, max_tokens, start_token) or \
                self.ends.serve(session_id, max_tokens, start_token)
            if handle is not None:
                return handle
            with self.parts.session_locks(session_id):
                # loaded while we waited?
                handle = self._read_dram(session_id, max_tokens, start_token)
                if handle is not None:
                    return handle
                if not self.parts.writer.busy(session_id):
                    return self._load_from_ssd(session_id, max_tokens, speculative,
                                               start_token)
            self.parts.writer.wait(session_id)  # its SSD copy is on the way: read it once it is

    def _read_dram(self, session_id: str, max_tokens: int, start_token: int
                   ) -> ReadHandle | None:
        with self.parts.lock:
            meta = self.parts.index.metas.get(session_id)
            if meta is None:
                self.parts.counters.misses += 1
                raise errors.not_found(f"no KV stored for session {session_id!r}")
            want = meta.num_tokens if max_tokens == 0 else min(max_tokens, meta.num_tokens)
            if start_token and start_token >= want:
                raise errors.out_of_range(f"start_token {start_token} is not below the {want} "
                                          f"tokens of session {session_id!r} to read")
            if session_id not in self.parts.dram:
                return None
            self.parts.counters.dram_hits += 1
            self.parts.dram.touch(session_id, time.monotonic())
            served = SessionMeta(session_id, meta.format, meta.bytes_per_token, meta.model,
                                 meta.token_ids[:want], meta.dtype)
            pieces = self.parts.dram.pieces(session_id, served.num_bytes,
                                            skip=start_token * served.bytes_per_token)
            return ReadHandle(served, Tier.DRAM, shm=pieces, arena=self.parts.dram.arena,
                              on_release=lambda: self.parts.space.release_pieces(pieces),
                              start_token=start_token)

    def load_prepared(self, session_id: str) -> bool:
        """A prepared load (its turn has not arrived): end first where the session has record
        edges to cut at (end_first.py), else whole. False if its turn took the end it had
        landed (the load stopped), else True (whether it is in DRAM now, or failed)."""
        with self.parts.persister.ssd.gate.wanted(session_id):
            while True:
                with self.parts.session_locks(session_id):
                    if session_id in self.parts.dram:
                        return True
                    if not self.parts.writer.busy(session_id):
                        outcome = self.ends.load(session_id)
                        if outcome is None:
                            self._load_from_ssd(session_id, 0, False, 0).release()
                        return outcome != HANDED_OVER
                self.parts.writer.wait(session_id)

    def _read_part(self, session_id: str, max_tokens: int, start_token: int,
                   stop) -> ReadHandle:
        return self._load_from_ssd(session_id, max_tokens, False, start_token, stop)

    def _load_from_ssd(self, session_id: str, max_tokens: int, background: bool,
                       start_token: int, stop=None) -> ReadHandle:
        """Read the session file (verified) into a new DRAM segment, or aligned memory when
        DRAM has no room; the caller holds the session lock. A read of fewer tokens than the
        session holds (a load-or-recompute split: a prefix, or from `start_token` on) reads
        only the records holding them, and the session stays on SSD (DRAM holds whole
        sessions)."""
        with self.parts.lock:
            meta = self.parts.index.metas.get(session_id)
            stored = meta.num_tokens if meta is not None else 0
        prefix = max_tokens if 0 < max_tokens < stored else 0
        started = time.monotonic()
        for _ in range(3):
            try:
                got = self.parts.persister.read_session(session_id, True, prefix, background,
                                                        start_token, stop)
            except ReadStopped as stopped:  # its bytes were read all the same
                with self.parts.lock:
                    self.parts.counters.ssd_bytes_read += stopped.bytes_read
                raise
            if got is not None:
                break
        else:
            raise errors.unavailable(f"session {session_id!r} kept changing while read")
        result, segments, buffer, version = got
        log_ = result.log
        with self.parts.lock:
            if not background and self.parts.demand_read is not None:
                self.parts.demand_read(started, time.monotonic())
            if log_.meta is None:
                self.parts.counters.misses += 1
                if segments:
                    self.parts.space.release_segments(segments)
                raise errors.not_found(f"KV of session {session_id!r} failed its checksum "
                                       "and was dropped; recompute")
            self.parts.counters.ssd_hits += 1
            self.parts.counters.ssd_bytes_read += result.valid_end
            self.parts.index.touch_ssd(session_id)
            served = log_.meta.copy()
            indexed = self.parts.index.metas.get(session_id)
            # DRAM serves the index's token ids: only bytes read for exactly those go there (a
            # file rewritten behind the index, by a second store over this directory, is
            # served as read, with its own token ids, but never kept under the index's)
            if segments and not prefix and not start_token \
                    and self.parts.index.versions.get(session_id) == version \
                    and indexed is not None and indexed.token_ids == log_.meta.token_ids \
                    and not self.parts.writer.busy(session_id):
                self.parts.dram.put(session_id, _image_pieces(segments, log_.pieces), time.monotonic())
            log_.cut(served.num_tokens if max_tokens == 0 else max_tokens)
            served.token_ids = log_.meta.token_ids
            if start_token and start_token >= served.num_tokens:  # a bad record cut it off
                if segments:
                    self.parts.space.release_segments(segments)
                raise errors.not_found(f"KV of session {session_id!r} from token {start_token} "
                                       "failed its checksum and was dropped; recompute")
            tail = log_.tail(start_token)
            if segments:
                pieces = _image_pieces(segments, tail)
                for piece in pieces:
                    self.parts.dram.arena.ref(piece.segment)
                self.parts.space.release_segments(segments)  # the creators' references
                handle = ReadHandle(served, Tier.SSD, shm=pieces, arena=self.parts.dram.arena,
                                    on_release=lambda: self.parts.space.release_pieces(pieces),
                                    start_token=start_token)
            else:
                handle = ReadHandle(served, Tier.SSD, buffer=buffer, start_token=start_token,
                                    spans=[(p.offset, p.length) for p in tail])
            loc = self.parts.index.location(session_id)
        self.parts.events.publish(loc)
        return handle

    def open_shm_read(self, session_id: str, max_tokens: int, lease_seconds: float,
                      start_token: int = 0) -> tuple[ReadHandle, str]:
        """A read whose bytes stay in shared memory for a co-located worker, under a lease that
        keeps its regions until released or expired."""
        with self.parts.lock:
            need = 0 if session_id in self.parts.dram or self.ends.covers(session_id, start_token) \
                else self.parts.index.ssd.file_bytes.get(session_id, 0)  # (its load has room)
            too_big = need > self.parts.dram.capacity
            # Make room before reading: a read that lands outside shared memory would be read
            # from the SSD a second time by the stream the worker falls back to.
            no_room = not too_big and need > 0 and not self.parts.space.make_room(need,
                                                                            keep={session_id})
        if too_big or no_room:  # say so before reading it: the stream will read it once
            raise errors.precondition(
                f"KV of session {session_id!r} is larger than shared memory; read it over the "
                "gRPC stream" if too_big else f"no room in shared memory for the KV of session "
                f"{session_id!r} now; read it over the gRPC stream")
        handle = self.open_read(session_id, max_tokens, start_token=start_token)
        if handle.buffer is not None:
            handle.release()
            raise errors.precondition(f"KV of session {session_id!r} does not fit in shared "
                                      "memory now; read it over the gRPC stream")
        with self.parts.lock:
            lease_id = self.parts.leases.acquire(session_id, time.monotonic(),
                                           lease_seconds or self.parts.lease_seconds, pin=False)
            self._holds[lease_id] = handle
            self.parts.counters.shm_reads += 1
        return handle, lease_id

    # -- holds (under the store lock) -------------------------------------------------------

    def hold_promoted(self, session_id: str, seconds: float) -> None:
        """Pin a promoted session in DRAM until its turn reads it, at most `seconds`."""
        if self._promoted.get(session_id) not in self.parts.leases:
            self._promoted[session_id] = self.parts.leases.acquire(session_id, time.monotonic(),
                                                             seconds)

    def drop_promoted_hold(self, session_id: str) -> None:
        """The session ended: its promotion's pin has no turn left to wait for."""
        hold = self._promoted.pop(session_id, None)
        if hold is not None:
            self.parts.leases.release(hold)

    def release_hold(self, lease_id: str) -> None:
        handle = self._holds.pop(lease_id, None)
        if handle is not None:
            handle.release()

    def drop_expired_holds(self) -> None:
        for lease_id in [lid for lid in self._holds if lid not in self.parts.leases]:
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
