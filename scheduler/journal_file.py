"""An append-only file of JSON lines that is rewritten from the live state once it has grown
past it: what the scheduler's journals (the conversation index, the stored responses) share.

Each line is appended and flushed (a killed process loses nothing it wrote; a machine crash may
lose the last lines). Once the file is `compact_ratio` times what the last snapshot needed, a
thread writes a new snapshot beside it, adds the lines appended meanwhile and renames it over
the file (never on a caller's path). The files hold what conversations said, or hashes of it,
so they are the service's only (mode 0600; a directory made here is 0700). A full disk costs
the journal (one WARNING), never the caller.
"""
from __future__ import annotations

import logging
import os
import pathlib
import threading
from typing import Callable, Iterable, Iterator

log = logging.getLogger("bidaw.scheduler")

Snapshot = Callable[[], Iterable[bytes]]  # the live state, as lines


class JournalFile:
    def __init__(self, path: pathlib.Path, what: str, compact_ratio: float = 2.0,
                 min_compact_bytes: int = 1 << 20):
        """`what`: what the file keeps, for its thread and its warnings."""
        self.path, self.dir, self.what = path, path.parent, what
        self.compact_ratio = compact_ratio
        self.min_compact_bytes = min_compact_bytes
        self._lock = threading.Lock()
        self._file = None
        self._bytes = 0  # the file's size
        self._live = 0  # bytes of the last snapshot: what the state needed then
        self._failing = False  # the last write failed (warned once)
        self._pending: list[bytes] | None = None  # lines appended while a compaction runs
        self._compaction: threading.Thread | None = None
        self._closing = False

    def lines(self) -> Iterator[bytes]:
        """The file's lines as they are (to replay, before `open`)."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # an existing one is left as is
        if self.path.exists():
            with open(self.path, "rb") as f:
                yield from f

    def open(self, snapshot: Snapshot) -> None:
        """Start appending, to a file rewritten from `snapshot` (the state just replayed)."""
        tmp, size = self._write_snapshot(snapshot)
        with self._lock:
            self._install(tmp, size)

    def write(self, line: bytes, snapshot: Snapshot) -> None:
        with self._lock:
            if self._file is None:  # closed
                return
            if self._pending is not None:  # the compaction's new file takes it too
                self._pending.append(line)
            try:
                self._file.write(line)
                self._file.flush()
                self._failing = False
            except OSError as exc:
                self._warn(exc)
                return
            self._bytes += len(line)
            if (self._compaction is None and not self._closing
                    and self._bytes > max(self.min_compact_bytes, self.compact_ratio * self._live)):
                self._pending = []
                self._compaction = threading.Thread(target=self._compact, args=(snapshot,),
                                                    name=f"{self.what}-journal", daemon=True)
                self._compaction.start()

    def close(self) -> None:
        """Stop appending (a compaction under way finishes first)."""
        with self._lock:
            self._closing = True  # none starts from here on
            compaction = self._compaction
        if compaction is not None:
            compaction.join()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _compact(self, snapshot: Snapshot) -> None:
        """The live state written beside the file, then the lines appended meanwhile, then
        renamed over it; until then appends still go to the old file, complete on its own."""
        try:
            tmp, size = self._write_snapshot(snapshot)
            with self._lock:
                with open(tmp, "ab") as f:
                    f.writelines(self._pending or ())
                    f.flush()
                    os.fsync(f.fileno())
                size += sum(map(len, self._pending or ()))
                self._install(tmp, size)
        except OSError as exc:
            with self._lock:
                self._warn(exc)
        finally:
            with self._lock:
                self._pending, self._compaction = None, None

    def _write_snapshot(self, snapshot: Snapshot) -> tuple[pathlib.Path, int]:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a leftover from an earlier run keeps its mode otherwise
        size = 0
        with os.fdopen(fd, "wb") as f:
            for line in snapshot():
                f.write(line)
                size += len(line)
            f.flush()
            os.fsync(f.fileno())
        return tmp, size

    def _install(self, tmp: pathlib.Path, size: int) -> None:
        """`tmp` becomes the journal (under the lock)."""
        os.replace(tmp, self.path)
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if self._file is not None:
            self._file.close()
        self._file = open(self.path, "ab")
        self._bytes = self._live = size

    def _warn(self, exc: OSError) -> None:
        if not self._failing:
            log.warning("%s journal %s: %s; kept in memory only", self.what, self.path,
                        exc.strerror or exc)
        self._failing = True
