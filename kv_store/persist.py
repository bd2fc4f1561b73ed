"""The store's SSD paths: writing a turn's record durably (room, disk full, compaction) and
reading a session back verified (a bad record shortens the session to what checks out).

A write runs on the session's ordered writer thread under the index's lock for the session: it
re-reads the committed state, appends the record at the committed end, fsyncs, and only then
publishes the new committed length and version. A torn or corrupt record is detected by its
checksum when read: the session keeps the tokens before it (they were acknowledged and are
intact), the rest is cut off the file and is a miss, recomputed by the next turn.
"""
from __future__ import annotations

import errno
import logging
import threading
import zlib

from kv_store import errors
from kv_store.catalog.base import Catalog, CatalogEntry
from kv_store.session_index import SessionIndex
from kv_store.session_meta import SessionMeta
from kv_store.store_state import StoreCounters
from kv_store.tier_space import TierSpace
from kv_store.tiers import ssd_record
from kv_store.tiers.aligned_io import aligned_buffer
from kv_store.tiers.buffers import Payload
from kv_store.tiers.read_gate import ReadStopped
from kv_store.tiers.scatter import ScatterView
from kv_store.tiers.shm_arena import Segment
from kv_store.tiers.ssd import SsdTier
from kv_store.tiers.ssd_log import SessionLog
from kv_store.tiers.ssd_record import CorruptRecord
from kv_store.tiers.ssd_verify import ReadResult
from services.runtime.log_repeats import Reminder, since

log = logging.getLogger("bidaw.kv_store")
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
COMPACT_MIN_WASTE = 4 << 20  # bytes of headers, padding and replaced tails before compacting
COMPACT_WASTE_RATIO = 0.25  # ... and that share of the session's own bytes
DISK_FULL_REMIND_S = 300.0  # while the disk stays full: one WARNING, then one this often


class Persister:
    """The SSD side of the store: over the SSD tier, the catalog and the session index (which
    it tells what became durable, or reverts), making room through `space`."""

    def __init__(self, ssd: SsdTier, catalog: Catalog, index: SessionIndex, space: TierSpace,
                 counters: StoreCounters, lock: threading.RLock):
        self.ssd = ssd
        self.catalog = catalog
        self.index = index
        self.space = space
        self.counters = counters
        self._lock = lock
        self._disk_full_said = Reminder(DISK_FULL_REMIND_S)

    # -- writes (on the writer thread of the session) -----------------------------------------

    def persist(self, session_id: str, start: int, token_ids: list[int], format: int,
                bytes_per_token: int, model: str, payload: Payload, dtype: int = 0) -> int:
        """Append one record; durable when this returns. On failure the session goes back
        to its durable state and the error (a StoreError) reaches a waiting writer."""
        view = None
        try:
            with self.catalog.lock(session_id):
                entry = self.catalog.get(session_id)
                base = entry.meta if entry is not None and start > 0 else None
                if start > 0 and (base is None or start > base.num_tokens or not base.compatible(
                        format, bytes_per_token, model, dtype)):
                    raise errors.aborted(f"session {session_id!r} changed on SSD under this "
                                         "write (dropped, or written by another replica); look "
                                         "it up and write again")
                meta = SessionMeta(session_id, format, bytes_per_token, model,
                                   (base.token_ids[:start] if base else []) + token_ids, dtype)
                view = payload.scatter()
                crc = 0
                for chunk in view.chunks(0, len(view)):
                    crc = zlib.crc32(chunk, crc)
                header = ssd_record.encode_header(session_id, format, start, bytes_per_token,
                                                  model, token_ids, len(view), crc, dtype)
                offset = entry.ssd_len if base is not None else 0
                end = self._append(session_id, offset, header, view)
                written = end - offset
                if self._wants_compaction(meta, end):
                    end, rewritten = self._compact(session_id, meta, end)
                    written += rewritten
                version = (entry.version if entry is not None else 0) + 1
                self.catalog.put(CatalogEntry(meta, end, version))
            with self._lock:
                self.index.versions[session_id] = version
                self.counters.ssd_bytes_written += written
                self.counters.kv_bytes_written += len(view)
            return end
        except Exception as exc:
            if isinstance(exc, CorruptRecord):
                self._resync(session_id)
            with self._lock:
                self.counters.ssd_write_failures += 1
                self.index.revert(session_id)
            if isinstance(exc, errors.StoreError):
                raise
            if isinstance(exc, OSError):
                raise errors.unavailable(f"SSD write failed: {exc.strerror or exc}") from None
            if isinstance(exc, CorruptRecord):
                raise errors.aborted(f"{exc}; look the session up and write again") from None
            log.exception("SSD write of %r failed", session_id)
            raise errors.unavailable(f"SSD write failed: {exc}") from None
        finally:
            view = None
            self.space.release_payload(payload)

    def _append(self, session_id: str, offset: int, header: bytes, view: ScatterView) -> int:
        need = len(header) + len(view) + 4096
        if offset + need > self.space.ssd_bytes:  # no eviction can make this room: evict none
            raise errors.exhausted(
                f"the session's KV ({offset + need} bytes on SSD with this record) is larger "
                f"than the SSD tier ({self.space.ssd_bytes} bytes, --ssd-bytes): not stored "
                "(the next turn recomputes)")
        with self._lock:
            if not self.space.reserve_ssd(session_id, need):
                raise errors.exhausted("SSD tier is full of KV in use (leased, loading or being "
                                       "written); retry later")
        try:
            return self.ssd.append(session_id, offset, header, view, True)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            self._disk_full(session_id, exc)
        with self._lock:
            freed = self.space.reserve_ssd(session_id, need, force=True)
        if freed:
            try:
                return self.ssd.append(session_id, offset, header, view, True)
            except OSError as exc:
                if exc.errno not in _DISK_FULL:
                    raise
        raise errors.exhausted("the SSD tier's disk is full and nothing more can be evicted; "
                               "the KV was not stored (the next turn recomputes)")

    def _disk_full(self, session_id: str, exc: OSError) -> None:
        """The disk refused a write (evicting follows): one WARNING, then at most one every
        DISK_FULL_REMIND_S with the count since. A disk smaller than --ssd-bytes, or filled by
        something else, refuses a write on every turn: a line each was thousands of lines."""
        held = self._disk_full_said.due()
        if held is not None:
            log.warning("SSD disk full writing %r (%s): evicting to make room%s", session_id,
                        exc, since(held))

    @staticmethod
    def _wants_compaction(meta: SessionMeta, end: int) -> bool:
        waste = end - meta.num_bytes
        return waste > max(COMPACT_MIN_WASTE, COMPACT_WASTE_RATIO * meta.num_bytes)

    def _compact(self, session_id: str, meta: SessionMeta, end: int) -> tuple[int, int]:
        """Rewrite the session as one record (replaced tails and per-turn padding go)."""
        image = aligned_buffer(end)
        try:
            result = self.ssd.read(session_id, end, image)
            if result.corrupt or result.log.meta.token_ids != meta.token_ids:
                log.warning("not compacting %r: %s", session_id, result.corrupt or "mismatch")
                return end, 0
            live = aligned_buffer(meta.num_bytes)
            pos = 0
            for piece in result.log.pieces:
                live[pos:pos + piece.length] = image[piece.offset:piece.offset + piece.length]
                pos += piece.length
            view = memoryview(live)[:meta.num_bytes]
            header = ssd_record.encode_header(session_id, meta.format, 0, meta.bytes_per_token,
                                              meta.model, meta.token_ids, len(view),
                                              zlib.crc32(view), meta.dtype)
            new_end = self.ssd.append(session_id, 0, header, view, True)
            return new_end, new_end
        except OSError as exc:  # the appended record stands; compaction waits for a later turn
            log.warning("compaction of %r failed: %s", session_id, exc)
            return end, 0

    def _resync(self, session_id: str) -> None:
        """The file lost its committed tail (a crash between a rewrite and its publication):
        take what the file holds as the committed state."""
        path = self.ssd.path(session_id)
        with self.catalog.lock(session_id):
            entry = self.catalog.get(session_id)
            log_, end = self.ssd.scan_file(path) if path.exists() else (SessionLog(), 0)
            if log_.meta is None:
                self.ssd.delete(session_id)
                self.catalog.delete(session_id)
            else:
                self.ssd.set_length(session_id, end)
                self.catalog.put(CatalogEntry(log_.meta, end,
                                              (entry.version if entry else 0) + 1))

    # -- reads (the caller holds the session lock; no write of the session is running) --------

    def read_session(self, session_id: str, admit: bool, prefix_tokens: int = 0,
                     background: bool = False, from_token: int = 0, stop=None):
        """(result, segments or None, buffer or None, version) with the verified file image in
        new DRAM segments (`admit` and room) or aligned memory; None if the file changed under
        the read (read again). `prefix_tokens` > 0: only the records holding those first tokens
        (SsdTier.prefix_length). `background`: a speculative read (it yields to demand).
        `from_token` > 0: only the records from the last one holding that token on
        (SsdTier.suffix_start); the image then starts there, and the result's log holds the
        tokens before it with their bytes UNREAD (ssd_scan.py). `stop`: see SsdTier.read_file
        (ReadStopped leaves nothing behind)."""
        entry = self.catalog.get(session_id)
        segments: list[Segment] | None = None
        length = entry.ssd_len if entry is not None else 0
        if entry is not None and prefix_tokens > 0:
            length = self.ssd.prefix_length(session_id, prefix_tokens, entry.ssd_len)
        base, seed = 0, None
        if entry is not None and from_token > 0:
            found = self.ssd.suffix_start(session_id, from_token, length)
            if found is None:
                return None  # changed since the caller saw it hold that token: read again
            base, seed = found
        with self._lock:
            if entry is not None and admit:
                segments = self.space.dram_segments(session_id, 0, length - base)
        if entry is None:
            with self._lock:
                self.index.forget(session_id, local_only=True)
            return ReadResult(SessionLog(), 0), None, None, 0
        try:
            arena = self.space.dram.arena
            image = ScatterView([arena.view(s) for s in segments]) if segments else \
                aligned_buffer(length - base)
            with self.ssd.open_read(session_id) as f:
                result = self.ssd.read_file(f, length, image, background, base, seed, stop)
        except ReadStopped:
            if segments:
                self.space.release_segments(segments)
            raise
        except OSError as exc:
            result = ReadResult(SessionLog(), 0, f"unreadable: {exc.strerror or exc}")
        found = result.log.meta
        if found is not None and found.session_id != session_id:
            # The file under this session's name holds another session's records (copied or
            # restored over it while we run; the start-up scan refuses such files too): none
            # of it is this session's KV, and its bytes must never be served under this name.
            result = ReadResult(SessionLog(), 0, f"the file holds the records of session "
                                                 f"{found.session_id!r}")
        version = entry.version
        if result.corrupt:
            version = self._drop_bad_tail(session_id, entry, result, base)
            if version is None:
                if segments:
                    self.space.release_segments(segments)
                return None
        if segments:
            return result, segments, None, version
        return result, None, image, version

    def _drop_bad_tail(self, session_id: str, entry: CatalogEntry, result: ReadResult,
                       base: int = 0) -> int | None:
        """Cut the file after the last good record (`base` + the read's valid end); the new
        version (None: the file changed since it was read, so the fault may be ours: read
        again)."""
        with self.catalog.lock(session_id):
            current = self.catalog.get(session_id)
            if current is None or current.version != entry.version:
                return None
            kept = result.log.meta
            good = base + result.valid_end
            log.warning("session %r: %s at byte %d; keeping its first %d tokens", session_id,
                        result.corrupt, good, 0 if kept is None else kept.num_tokens)
            version = entry.version + 1
            if kept is None:
                self.ssd.delete(session_id)
                self.catalog.delete(session_id)
            else:
                self.ssd.truncate(session_id, good)
                fixed = CatalogEntry(kept.copy(), good, version)
                self.catalog.put(fixed)
        with self._lock:
            self.counters.corrupt_records += 1
            if kept is None:
                self.index.forget(session_id, local_only=True)
            else:
                self.index.adopt(fixed)
        return version
