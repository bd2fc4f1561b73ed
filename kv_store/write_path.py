"""The store's write path: where a write's bytes land (a DRAM region, or aligned memory for the
SSD only), the DRAM entry it extends, and the ordered SSD copy it is acknowledged after (or
before, when the writer allows it: see store.py), and the shared-memory regions prepared for
a co-located worker's write (held here until its WriteKV comes, or their lease expires)."""
from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future

from kv_store import errors
from kv_store.path_parts import PathParts
from kv_store.events import EventHub, Location
from kv_store.leases import Leases
from kv_store.persist import Persister
from kv_store.session_index import SessionIndex
from kv_store.session_meta import SessionMeta
from kv_store.store_state import (KV_DTYPES, KV_FORMATS, SessionLocks, StoreCounters,
                                  check_session_id)
from kv_store.tier_space import TierSpace
from kv_store.tiers.buffers import Payload
from kv_store.tiers.dram import DramTier, ShmPiece
from kv_store.tiers.ssd_writer import OrderedWriter


class WritePath:
    def __init__(self, parts: PathParts):
        self.parts = parts
        # prepared co-located write: region name -> (session, payload, lease)
        self._prepared: dict[str, tuple[str, Payload, str]] = {}

    def new_payload(self, session_id: str, start_token: int, nbytes: int) -> Payload:
        """Memory for a write's bytes: DRAM segments when the tier will keep them."""
        with self.parts.lock:
            segments = self.parts.space.dram_segments(session_id, start_token, nbytes)
        return Payload(nbytes, self.parts.dram.arena, segments) if segments else Payload(nbytes)

    def prepare_shm_write(self, session_id: str, start_token: int, nbytes: int,
                          lease_seconds: float) -> tuple[str, list[ShmPiece], str]:
        """Regions for a co-located worker to write a turn's KV into, in order, the name the
        WriteKV that follows gives them, and their lease (released: the write will not come)."""
        check_session_id(session_id)
        if nbytes <= 0:
            raise errors.invalid("num_bytes must be positive")
        with self.parts.lock:
            segments = self.parts.space.dram_segments(session_id, start_token, nbytes)
            if segments is None:
                raise errors.exhausted("this write cannot go to shared memory now (no room, or "
                                       "the session is not in DRAM); send it over the stream")
            lease_id = self.parts.leases.acquire(session_id, time.monotonic(),
                                           lease_seconds or self.parts.lease_seconds, pin=False)
            payload = Payload(nbytes, self.parts.dram.arena, segments)
            self._prepared[segments[0].name] = (session_id, payload, lease_id)
            return segments[0].name, payload.pieces(), lease_id

    def take_prepared(self, region: str, session_id: str, nbytes: int) -> Payload:
        with self.parts.lock:
            entry = self._prepared.pop(region, None)
            if entry is None:
                raise errors.precondition(f"no prepared region {region!r} (expired?)")
            owner, payload, lease_id = entry
            self.parts.leases.release(lease_id)
            if owner != session_id or payload.nbytes != nbytes:
                payload.release(self.parts.dram.arena.unref)
                raise errors.invalid(f"region {region!r} was prepared for {payload.nbytes} "
                                     f"bytes of session {owner!r}")
            self.parts.counters.shm_writes += 1
            return payload

    def write(self, session_id: str, start_token: int, token_ids: list[int], format: int,
              bytes_per_token: int, model: str, payload: Payload,
              wait_durable: bool = True, dtype: int = 0) -> tuple[Location, bool]:
        """Store tokens [start_token, start_token+len(token_ids)) from `payload` (taken over),
        KV of `dtype` (a KvDtype). Returns the session's location and whether the write is
        durable on SSD."""
        try:
            self._check_write(session_id, format, bytes_per_token, token_ids, payload.nbytes,
                              dtype)
            self.parts.index.refresh(session_id)
        except errors.StoreError:
            self.release_payload(payload)
            raise
        with self.parts.session_locks(session_id):
            with self.parts.lock:
                try:
                    base, same = self._write_base(session_id, start_token, format,
                                                  bytes_per_token, model, dtype)
                except errors.StoreError:
                    self.release_payload(payload)
                    raise
                meta = SessionMeta(session_id, format, bytes_per_token, model,
                                   base.token_ids[:start_token] + list(token_ids), dtype)
                in_dram = self._apply_to_dram(session_id, same, start_token * bytes_per_token,
                                              payload)
                self.parts.index.record_write(session_id, meta)
                fut = self.parts.writer.submit(
                    session_id,
                    lambda: self.parts.persister.persist(session_id, start_token, list(token_ids),
                                                   format, bytes_per_token, model, payload,
                                                   dtype),
                    on_cancel=lambda: self.release_payload(payload))
                loc = self.parts.index.location(session_id)
            self.parts.events.publish(loc)
            if not wait_durable and in_dram:
                return loc, False
            self._wait(fut)
            with self.parts.lock:
                return self.parts.index.location(session_id), True

    @staticmethod
    def _check_write(session_id: str, format: int, bytes_per_token: int, token_ids: list[int],
                     nbytes: int, dtype: int) -> None:
        check_session_id(session_id)
        if format not in KV_FORMATS:
            raise errors.invalid("header.format must be KV_FORMAT_KV or KV_FORMAT_TENSOR6")
        if dtype not in KV_DTYPES:
            raise errors.invalid("header.dtype must be a KV_DTYPE_* value")
        if bytes_per_token <= 0:
            raise errors.invalid("header.bytes_per_token must be positive")
        if not token_ids:
            raise errors.invalid("header carries no tokens")
        if nbytes != len(token_ids) * bytes_per_token:
            raise errors.invalid(f"got {nbytes} bytes of KV, header promises "
                                 f"{len(token_ids)} tokens x {bytes_per_token} bytes")

    def _write_base(self, session_id: str, start_token: int, format: int, bytes_per_token: int,
                    model: str, dtype: int) -> tuple[SessionMeta, bool]:
        """The state a write builds on, and whether it extends the stored entry."""
        old = self.parts.index.metas.get(session_id)
        if old is not None and not old.compatible(format, bytes_per_token, model, dtype) \
                and start_token > 0:
            raise errors.precondition(f"session {session_id!r} holds KV of another model, "
                                      "format or dtype; write from start_token 0 to replace it")
        if old is None or start_token == 0:
            base = SessionMeta(session_id, format, bytes_per_token, model, [], dtype)
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
        if not payload.segments:
            self.parts.dram.drop(session_id)  # DRAM could not take the new bytes: SSD keeps it all
            return False
        pieces = payload.pieces()
        now = time.monotonic()
        if same_entry and session_id in self.parts.dram:
            self.parts.dram.write_at(session_id, offset, pieces, now)
            return True
        self.parts.dram.drop(session_id)
        if offset == 0:
            self.parts.dram.put(session_id, pieces, now)
            return True
        return False

    def _wait(self, fut: Future) -> None:
        try:
            fut.result()
        except CancelledError:
            raise errors.aborted("an earlier write of this session failed, so this one was "
                                 "dropped; look the session up and write again") from None

    def release_payload(self, payload: Payload) -> None:
        self.parts.space.release_payload(payload)

    # -- prepared regions (under the store lock) --------------------------------------------

    def prepared(self) -> int:
        return len(self._prepared)

    def drop_expired_prepared(self) -> None:
        for region, (_, payload, lease_id) in list(self._prepared.items()):
            if lease_id not in self.parts.leases:
                del self._prepared[region]
                payload.release(self.parts.dram.arena.unref)

    def close(self) -> None:
        for _, payload, _ in self._prepared.values():
            payload.release(self.parts.dram.arena.unref)
        self._prepared.clear()

