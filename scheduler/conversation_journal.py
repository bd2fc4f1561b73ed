"""The conversation index on disk: a restarted scheduler still recognises every conversation.

Turns sent without a session id are matched to their session by the keys of their history
(conversations.py). That index lived only in memory, so after a scheduler restart (a crash, an
upgrade, a pod's container restart) every such conversation started a new session and recomputed
its whole history once, although the store still held its KV. The journal keeps it: one JSON line
per recorded turn, appended and flushed (a killed process loses nothing it wrote; a machine crash
may lose the last lines, which costs recognition, never correctness: the worker reuses KV only for
the longest matching token prefix). At start the lines are replayed, oldest first, each at the age
it had (wall clock), and those past the index's `ttl_s` are skipped. Once the file is `compact_ratio`
times what the live index needs, it is rewritten from the index (a new file, then a rename).

The lines hold session ids and hashes of what the conversations said, so the file is the
service's only (mode 0600; a directory it makes is 0700).
"""
from __future__ import annotations

import json
import logging
import os
import pathlib
import threading
import time
from typing import Callable, Iterable

from scheduler.conversations import ConversationIndex, Recorded

log = logging.getLogger("bidaw.scheduler")
FILE = "conversations.jsonl"


class ConversationJournal:
    def __init__(self, directory: str, compact_ratio: float = 2.0,
                 min_compact_bytes: int = 1 << 20, wall: Callable[[], float] = time.time):
        self.dir = pathlib.Path(directory)
        self.path = self.dir / FILE
        self.compact_ratio = compact_ratio
        self.min_compact_bytes = min_compact_bytes
        self._wall = wall
        self._lock = threading.Lock()
        self._file = None
        self._bytes = 0  # the file's size
        self._live = 0  # bytes of the last snapshot: what the index needed then
        self._failing = False  # the last write failed (warned once)

    def load(self, index: ConversationIndex, now: float) -> int:
        """Replay the file into `index` (`now`: the index's clock) and open it for appending;
        returns the sessions restored. Damaged lines (a write cut short) are skipped."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # an existing one is left as is
        wall, restored, damaged = self._wall(), set(), 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        recorded, at = _decode(line)
                    except (ValueError, KeyError, TypeError):
                        damaged += 1
                        continue
                    age = wall - at
                    if age < index.ttl_s:
                        index.restore(recorded, now - max(age, 0.0))
                        restored.add(recorded.session)
        self._rewrite(index.recorded(), now)
        log.info("conversation index: %d conversations restored from %s%s", len(restored),
                 self.path, f" ({damaged} damaged lines skipped)" if damaged else "")
        return len(restored)

    def append(self, recorded: Recorded, index: ConversationIndex, now: float) -> None:
        """One recorded turn (after `index.record`), then a rewrite if the file has grown
        `compact_ratio` times past what the index needs (`now`: the index's clock)."""
        line = _encode(recorded, self._wall())
        with self._lock:
            if self._file is None:  # closed
                return
            try:
                self._file.write(line)
                self._file.flush()
                self._bytes += len(line)
                if self._bytes > max(self.min_compact_bytes, self.compact_ratio * self._live):
                    self._rewrite_locked(index.recorded(), now)
                self._failing = False
            except OSError as exc:  # a full disk costs recognition after a restart, not the turn
                if not self._failing:
                    log.warning("conversation journal %s: %s; the index is kept in memory",
                                self.path, exc.strerror or exc)
                self._failing = True

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def _rewrite(self, entries: Iterable[tuple[Recorded, float]], now: float) -> None:
        with self._lock:
            self._rewrite_locked(entries, now)

    def _rewrite_locked(self, entries: Iterable[tuple[Recorded, float]], now: float) -> None:
        """The live index as the whole file: written beside it, synced, renamed over it."""
        wall = self._wall()
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a leftover from an earlier run keeps its mode otherwise
        with os.fdopen(fd, "wb") as f:
            size = 0
            for recorded, touched in entries:
                line = _encode(recorded, wall - (now - touched))
                f.write(line)
                size += len(line)
            f.flush()
            os.fsync(f.fileno())
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


def _encode(r: Recorded, at: float) -> bytes:
    row = {"t": round(at, 3), "s": r.session, "k": [k.hex() for k in r.path]}
    if r.length >= 0:
        row["b"], row["n"] = r.boundary.hex(), r.length
    if r.parent:
        row["p"], row["c"] = r.parent, r.shared
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> tuple[Recorded, float]:
    row = json.loads(line)
    at = float(row["t"])
    path = tuple(bytes.fromhex(k) for k in row["k"])
    if not isinstance(row["s"], str) or not row["s"] or not path:
        raise ValueError("no session or no keys")
    recorded = Recorded(row["s"], path, bytes.fromhex(row.get("b", "")), int(row.get("n", -1)),
                        str(row.get("p", "")), int(row.get("c", 0)))
    return recorded, at
