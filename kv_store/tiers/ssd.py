"""The SSD (capacity) tier: one log file of aligned records per session.

Access pattern: each turn appends its new KV; a promotion reads the whole session. So a session
is one file: a turn is one aligned record written at the committed end with one O_DIRECT
`pwritev` and an fdatasync before the write is acknowledged, and a read is one sequential pass of
large aligned reads (`io_bytes` each, `read_depth` in flight) whose checksums are verified as
the bytes land (ssd_verify.py), overlapping the CPU work with the disk. A write from token 0 (a new session, a
replaced history, a compaction) goes to a temporary file renamed over the old one, so a crash
leaves the old file or the new one, never a mix. File names are a hash of the session id, so no
id can name a path outside the data directory.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kv_store.tiers import ssd_scan
from kv_store.tiers.aligned_io import ALIGN, DirectFile, align_up, aligned_buffer, fsync_dir
from kv_store.tiers.bandwidth import BandwidthCap, BandwidthMeter
from kv_store.tiers.read_gate import ReadGate, ReadStopped, stop_check
from kv_store.tiers.scatter import ScatterView
from kv_store.tiers.ssd_log import SessionLog
from kv_store.tiers.ssd_record import CorruptRecord
from kv_store.tiers.ssd_verify import ReadResult, RecordChecker

# A background (speculative) read goes in chunks this small, this many in flight, so a demand
# read that arrives meanwhile waits for at most these before the disk is its own.
BACKGROUND_IO_BYTES = 2 << 20
BACKGROUND_DEPTH = 2


class SsdTier:
    def __init__(self, root: str | os.PathLike, direct_io: bool = True, io_bytes: int = 8 << 20,
                 read_depth: int = 4, cap: BandwidthCap | None = None,
                 meter: BandwidthMeter | None = None):
        self.root = pathlib.Path(root)
        # KV and the token ids in each record's header are the tenants' conversations: only
        # the store's user may enter (0700 dirs, 0600 files, also for a tier made before).
        for directory in (self.root, self.root / "sessions"):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
        self.direct_io = direct_io
        self.io_bytes = max(align_up(io_bytes), ALIGN)
        self.read_depth = max(read_depth, 1)
        self.cap = cap or BandwidthCap(0)
        self.meter = meter or BandwidthMeter(1.5e9)
        self.file_bytes: dict[str, int] = {}  # session -> committed bytes of its file
        self._used = 0
        self._readers = ThreadPoolExecutor(max_workers=4 * self.read_depth,
                                           thread_name_prefix="ssd-read")
        self._active_reads = 0
        self._lock = threading.Lock()
        self.gate = ReadGate()  # demand reads first, speculative ones in what they leave

    @property
    def used_bytes(self) -> int:
        return self._used

    def set_length(self, session_id: str, length: int) -> None:
        """Record the committed length of a session's file (writers run on several threads)."""
        with self._lock:
            self._used += length - self.file_bytes.get(session_id, 0)
            self.file_bytes[session_id] = length

    def _forget_length(self, session_id: str) -> int:
        with self._lock:
            length = self.file_bytes.pop(session_id, 0)
            self._used -= length
            return length

    def path(self, session_id: str) -> pathlib.Path:
        digest = hashlib.sha256(session_id.encode()).hexdigest()
        return self.root / "sessions" / digest[:2] / f"{digest}.kv"

    # -- start-up ---------------------------------------------------------------------------

    def scan(self) -> list[tuple[SessionLog, int]]:
        """Rebuild the index from the files (headers only); cut torn or corrupt tails off,
        since they were never acknowledged. Returns each session's log and committed length."""
        found = []
        for path in sorted((self.root / "sessions").glob("*/*.kv")):
            scanned = ssd_scan.scan_stored(path, self.path)
            if scanned is None:
                continue  # not a file, or unreadable: skipped, left where it is
            log, good_len = scanned
            if log.meta is None:
                path.unlink(missing_ok=True)
                continue
            self.set_length(log.meta.session_id, good_len)
            found.append((log, good_len))
        for tmp in (self.root / "sessions").glob("*/*.tmp"):
            tmp.unlink(missing_ok=True)  # a rewrite that never got renamed into place
        return found

    def scan_file(self, path: pathlib.Path, limit: int | None = None, stop_at_token: int = 0
                  ) -> tuple[SessionLog, int]:
        """The log of the file's first `limit` bytes (all) and its length (ssd_scan.py)."""
        return ssd_scan.scan_file(path, self.path, limit, stop_at_token)

    def prefix_length(self, session_id: str, tokens: int, length: int) -> int:
        """Bytes of the session's file (of its committed `length`) that hold its first `tokens`
        tokens: up to the end of the last record starting before token `tokens`. The records
        after it start at or past that token, so they only append or replace from there on:
        a prefix of tokens is a prefix of the file. Headers only; `length` if unreadable."""
        try:
            return self.scan_file(self.path(session_id), length, stop_at_token=tokens)[1] or length
        except OSError:
            return length

    def suffix_start(self, session_id: str, token: int, length: int
                     ) -> tuple[int, SessionLog] | None:
        """Where a read of the session's tokens from `token` on starts, with the log before it
        (ssd_scan.suffix_start); None if unreadable or no such token."""
        try:
            return ssd_scan.suffix_start(self.path(session_id), self.path, token, length)
        except OSError:
            return None

    # -- writes -----------------------------------------------------------------------------

    def append(self, session_id: str, offset: int, header: bytes, payload,
               payload_aligned: bool) -> int:
        """Write one record at `offset` (the committed end); durable on return. Offset 0
        replaces the file atomically. Returns the new committed length. `payload`: a
        ScatterView, or any buffer."""
        if not isinstance(payload, ScatterView):
            payload = ScatterView([payload])
        path = self.path(session_id)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        if offset == 0:
            return self._write_fresh(session_id, path, header, payload, payload_aligned)
        end = offset + len(header) + align_up(len(payload))
        with DirectFile(path, os.O_WRONLY, self.direct_io) as f:
            if os.fstat(f.fd).st_size < offset:  # lost its tail (a crash of another replica)
                raise CorruptRecord(f"file of {session_id!r} is shorter than its committed end")
            try:
                f.pwrite_all(self._buffers(header, payload, payload_aligned, f.direct), offset)
                if os.fstat(f.fd).st_size > end:
                    f.truncate(end)  # an older tail past the committed end must not replay
                f.sync()
            except OSError:
                f.truncate(offset)  # leave no partial record behind (gives the space back)
                raise
        self.set_length(session_id, end)
        return end

    def _write_fresh(self, session_id: str, path: pathlib.Path, header: bytes,
                     payload: ScatterView, payload_aligned: bool) -> int:
        tmp = path.with_suffix(".tmp")
        end = len(header) + align_up(len(payload))
        try:
            with DirectFile(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, self.direct_io) as f:
                f.pwrite_all(self._buffers(header, payload, payload_aligned, f.direct), 0)
                f.sync()
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        fsync_dir(path.parent)
        self.set_length(session_id, end)
        return end

    @staticmethod
    def _buffers(header: bytes, payload: ScatterView, aligned: bool, direct: bool) -> list:
        """The record as buffers O_DIRECT accepts: page-aligned, whole pages. Every payload
        buffer but the last is whole pages already (ScatterView's rule)."""
        views = list(payload.chunks(0, len(payload)))
        pad = align_up(len(payload)) - len(payload)
        if not direct:
            return [header, *views, bytes(pad)]
        head = aligned_buffer(len(header))
        head[:len(header)] = header
        if not aligned:  # bytes from a socket: one copy into aligned memory
            body = aligned_buffer(len(payload))
            pos = 0
            for v in views:
                body[pos:pos + len(v)] = v
                pos += len(v)
            return [head, body]
        if not views:
            return [head]
        last = views.pop()
        whole = len(last) - len(last) % ALIGN
        out = [head, *views, last[:whole]]
        if whole < len(last):
            tail = aligned_buffer(len(last) - whole)
            tail[:len(last) - whole] = last[whole:]
            out.append(tail)
        return out

    def truncate(self, session_id: str, length: int) -> None:
        """Drop everything past `length` (records that failed their checksum)."""
        if length <= 0:
            self.delete(session_id)
            return
        os.truncate(self.path(session_id), length)
        self.set_length(session_id, length)

    def delete(self, session_id: str) -> int:
        """Remove the session's file; returns the bytes freed."""
        self.path(session_id).unlink(missing_ok=True)
        return self._forget_length(session_id)

    # -- reads ------------------------------------------------------------------------------

    def open_read(self, session_id: str) -> DirectFile:
        return DirectFile(self.path(session_id), os.O_RDONLY, self.direct_io)

    def read(self, session_id: str, length: int, into) -> ReadResult:
        with self.open_read(session_id) as f:
            return self.read_file(f, length, into)

    def read_file(self, f: DirectFile, length: int, into, background: bool = False,
                  base: int = 0, seed: SessionLog | None = None, stop=None) -> ReadResult:
        """Read bytes [base, length) of an open session file into `into` (a ScatterView, or one
        page-aligned buffer; at least align_up(length - base) bytes) and verify every record
        as its bytes arrive. `background`: a speculative read, which yields to demand reads
        (`gate`; the caller holds `gate.background`). `base` > 0 (a record's start): a suffix
        read, continuing `seed`, the log of the records before it (suffix_start); the result's
        offsets are then those of `into`, not of the file. `stop` (an Event) set: a demand
        read raises ReadStopped before its next chunk."""
        image = into if isinstance(into, ScatterView) else ScatterView([into])
        if background:  # not metered: its pauses are no measure of the disk
            return self._read_verified(f, image, length - base,
                                       min(self.io_bytes, BACKGROUND_IO_BYTES),
                                       min(self.read_depth, BACKGROUND_DEPTH),
                                       self.gate.wait_turn, base, seed)
        start = time.monotonic()
        with self._lock:
            self._active_reads += 1
            overlap = self._active_reads
        try:
            with self.gate.urgent():
                result = self._read_verified(f, image, length - base, self.io_bytes,
                                             self.read_depth, stop_check(stop), base, seed)
        finally:
            with self._lock:
                self._active_reads -= 1
        self.meter.observe(result.valid_end, time.monotonic() - start, overlap)
        return result

    def _read_chunk(self, f: DirectFile, view: memoryview, offset: int) -> int:
        wait = self.cap.reserve(len(view), time.monotonic())
        if wait > 0:
            time.sleep(wait)
        return f.pread_into(view, offset)

    def _read_verified(self, f: DirectFile, image: ScatterView, length: int, io_bytes: int,
                       depth: int, before_chunk=None, base: int = 0,
                       seed: SessionLog | None = None) -> ReadResult:
        jobs = [(off, view) for block in range(0, align_up(length), io_bytes)
                for off, view in _at(image, block, min(block + io_bytes, align_up(length)))]
        futures = {}

        def submit(k: int) -> None:
            if k < len(jobs):
                if before_chunk is not None:
                    before_chunk()
                off, view = jobs[k]
                futures[k] = self._readers.submit(self._read_chunk, f, view, base + off)

        for k in range(depth):
            submit(k)
        checker = RecordChecker(image, length, seed)
        try:
            for k, (off, view) in enumerate(jobs):
                got = futures.pop(k).result()
                try:
                    submit(k + depth)
                except ReadStopped as stopped:
                    stopped.bytes_read = off + got  # (and the chunks in flight, not counted)
                    raise
                checker.advance(off + got)
                if got < len(view) or checker.failed:
                    break
        finally:
            for fut in futures.values():  # stop early on a bad record; wait for the rest
                fut.cancel()
            for fut in futures.values():
                if not fut.cancelled():
                    fut.exception()
        return checker.result()

    def close(self) -> None:
        self._readers.shutdown(wait=True, cancel_futures=True)


def _at(image: ScatterView, start: int, stop: int) -> list[tuple[int, memoryview]]:
    """(file offset, buffer view) pairs covering image bytes [start, stop)."""
    out, pos = [], start
    for view in image.chunks(start, stop):
        out.append((pos, view))
        pos += len(view)
    return out
