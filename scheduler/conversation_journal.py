"""The conversation index on disk: a restarted scheduler still recognises every conversation.

Turns sent without a session id are matched to their session by the keys of their history
(conversations.py). That index lived only in memory, so after a scheduler restart (a crash, an
upgrade, a pod's container restart) every such conversation started a new session and recomputed
its whole history once, although the store still held its KV. The journal keeps it: one JSON line
per recorded turn (and one per conversation ended by its client, which a restart forgets
again), appended and flushed (a killed process loses nothing it wrote; a machine crash
may lose the last lines, which costs recognition, never correctness: the worker reuses KV only for
the longest matching token prefix). At start the lines are replayed, oldest first, each at the
age it had (wall clock), and those past the index's `ttl_s` are skipped. Once the file is
`compact_ratio` times what the live index needs, a thread rewrites it from the index (a new file,
then a rename; ~3 s at the index's 1,000,000-key bound, so never on a turn's path).

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
from typing import Callable

from scheduler.conversations import ConversationIndex, Recorded

log = logging.getLogger("bidaw.scheduler")
FILE = "conversations.jsonl"


class ConversationJournal:
    def __init__(self, directory: str, compact_ratio: float = 2.0,
                 min_compact_bytes: int = 1 << 20, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        """`clock`: the index's clock (its `touched` times); `wall`: what the file records."""
        self.dir = pathlib.Path(directory)
        self.path = self.dir / FILE
        self.compact_ratio = compact_ratio
        self.min_compact_bytes = min_compact_bytes
        self._clock, self._wall = clock, wall
        self._lock = threading.Lock()
        self._file = None
        self._bytes = 0  # the file's size
        self._live = 0  # bytes of the last snapshot: what the index needed then
        self._failing = False  # the last write failed (warned once)
        self._pending: list[bytes] | None = None  # lines appended while a compaction runs
        self._compaction: threading.Thread | None = None
        self._closing = False

    def load(self, index: ConversationIndex) -> int:
        """Replay the file into `index` and open it for appending; returns the sessions
        restored. Damaged lines (a write cut short) are skipped."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # an existing one is left as is
        now, wall, restored, damaged = self._clock(), self._wall(), set(), 0
        if self.path.exists():
            with open(self.path, "rb") as f:
                for line in f:
                    try:
                        recorded, at = _decode(line)
                    except (ValueError, KeyError, TypeError, RecursionError):
                        damaged += 1
                        continue
                    if isinstance(recorded, str):  # ended by its client
                        index.forget(recorded)
                        restored.discard(recorded)
                        continue
                    age = wall - at
                    if age < index.ttl_s:
                        index.restore(recorded, now - max(age, 0.0))
                        restored.add(recorded.session)
        tmp, size = self._snapshot(index)
        with self._lock:
            self._install(tmp, size)
        log.info("conversation index: %d conversations restored from %s%s", len(restored),
                 self.path, f" ({damaged} damaged lines skipped)" if damaged else "")
        return len(restored)

    def append(self, recorded: Recorded, index: ConversationIndex) -> None:
        """One recorded turn (after `index.record`). Once the file has grown `compact_ratio`
        times past what the index needs, a thread rewrites it (off the turn's path)."""
        self._write(_encode(recorded, self._wall()), index)

    def ended(self, session: str, index: ConversationIndex) -> None:
        """`session` ended (after `index.forget`): a restart must not bring it back."""
        self._write(_encode_end(session, self._wall()), index)

    def _write(self, line: bytes, index: ConversationIndex) -> None:
        with self._lock:
            if self._file is None:  # closed
                return
            if self._pending is not None:  # the compaction's new file takes it too
                self._pending.append(line)
            try:
                self._file.write(line)
                self._file.flush()
                self._failing = False
            except OSError as exc:  # a full disk costs recognition after a restart, not the turn
                self._warn(exc)
                return
            self._bytes += len(line)
            if (self._compaction is None and not self._closing
                    and self._bytes > max(self.min_compact_bytes, self.compact_ratio * self._live)):
                self._pending = []
                self._compaction = threading.Thread(target=self._compact, args=(index,),
                                                    name="conversation-journal", daemon=True)
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

    def _compact(self, index: ConversationIndex) -> None:
        """The live index written beside the file, then the lines appended meanwhile, then
        renamed over it; until then appends still go to the old file, complete on its own."""
        try:
            tmp, size = self._snapshot(index)
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

    def _snapshot(self, index: ConversationIndex) -> tuple[pathlib.Path, int]:
        """Every recorded session of `index` in a new file beside the journal, synced."""
        now, wall = self._clock(), self._wall()
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a leftover from an earlier run keeps its mode otherwise
        size = 0
        with os.fdopen(fd, "wb") as f:
            for recorded, touched in index.recorded():
                line = _encode(recorded, wall - (now - touched))
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
            log.warning("conversation journal %s: %s; the index is kept in memory",
                        self.path, exc.strerror or exc)
        self._failing = True


def _encode(r: Recorded, at: float) -> bytes:
    row = {"t": round(at, 3), "s": r.session, "k": [k.hex() for k in r.path]}
    if r.length >= 0:
        row["b"], row["n"] = r.boundary.hex(), r.length
    if r.parent:
        row["p"], row["c"] = r.parent, r.shared
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"


def _encode_end(session: str, at: float) -> bytes:
    return json.dumps({"t": round(at, 3), "s": session, "end": True},
                      separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> tuple[Recorded | str, float]:
    """A recorded turn, or the id of a session that ended, and when it was written."""
    row = json.loads(line)
    at = float(row["t"])
    if row.get("end") is True:
        if not isinstance(row["s"], str) or not row["s"]:
            raise ValueError("no session")
        return row["s"], at
    path = tuple(bytes.fromhex(k) for k in row["k"])
    if not isinstance(row["s"], str) or not row["s"] or not path:
        raise ValueError("no session or no keys")
    recorded = Recorded(row["s"], path, bytes.fromhex(row.get("b", "")), int(row.get("n", -1)),
                        str(row.get("p", "")), int(row.get("c", 0)))
    return recorded, at
