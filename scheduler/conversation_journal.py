"""The conversation index on disk: a restarted scheduler still recognises every conversation.

Turns sent without a session id are matched to their session by the keys of their history
(conversations.py). That index lived only in memory, so after a scheduler restart (a crash, an
upgrade, a pod's container restart) every such conversation started a new session and recomputed
its whole history once, although the store still held its KV. The journal keeps it: one JSON line
per recorded turn (and one per conversation ended by its client, which a restart forgets
again), in a JournalFile (journal_file.py: appended, flushed, compacted from the live index by a
thread, ~3 s at the index's 1,000,000-key bound, so never on a turn's path; mode 0600). A lost
last line costs recognition, never correctness: the worker reuses KV only for the longest
matching token prefix. At start the lines are replayed, oldest first, each at the age it had
(wall clock), and those past the index's `ttl_s` are skipped.
"""
from __future__ import annotations

import json
import logging
import pathlib
import time
from typing import Callable, Iterator

from scheduler.conversation_records import Prompt, Recorded
from scheduler.conversations import ConversationIndex
from scheduler.journal_file import JournalFile

log = logging.getLogger("bidaw.scheduler")
FILE = "conversations.jsonl"


class ConversationJournal:
    def __init__(self, directory: str, compact_ratio: float = 2.0,
                 min_compact_bytes: int = 1 << 20, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        """`clock`: the index's clock (its `touched` times); `wall`: what the file records."""
        self.file = JournalFile(pathlib.Path(directory) / FILE, "conversation", compact_ratio,
                                min_compact_bytes)
        self.path = self.file.path
        self._clock, self._wall = clock, wall

    def load(self, index: ConversationIndex) -> int:
        """Replay the file into `index` and open it for appending; returns the sessions
        restored. Damaged lines (a write cut short) are skipped."""
        now, wall, restored, damaged = self._clock(), self._wall(), set(), 0
        for line in self.file.lines():
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
        self.file.open(lambda: self._snapshot(index))
        log.info("conversation index: %d conversations restored from %s%s", len(restored),
                 self.path, f" ({damaged} damaged lines skipped)" if damaged else "")
        return len(restored)

    def append(self, recorded: Recorded, index: ConversationIndex) -> None:
        """One recorded turn (after `index.record`)."""
        self.file.write(_encode(recorded, self._wall()), lambda: self._snapshot(index))

    def ended(self, session: str, index: ConversationIndex) -> None:
        """`session` ended (after `index.forget`): a restart must not bring it back."""
        self.file.write(_encode_end(session, self._wall()), lambda: self._snapshot(index))

    def close(self) -> None:
        self.file.close()

    def _snapshot(self, index: ConversationIndex) -> Iterator[bytes]:
        """Every recorded session of `index`, as lines."""
        now, wall = self._clock(), self._wall()
        for recorded, touched in index.recorded():
            yield _encode(recorded, wall - (now - touched))


def _encode(r: Recorded, at: float) -> bytes:
    row = {"t": round(at, 3), "s": r.session, "k": [k.hex() for k in r.path]}
    if r.length >= 0:
        row["b"], row["n"] = r.boundary.hex(), r.length
    if r.parent:
        row["p"], row["c"] = r.parent, r.shared
    if r.named:
        row["m"] = 1
    if r.prompt is not None:
        row["q"], row["e"] = r.prompt.key.hex(), r.extent
        if r.prompt.length >= 0:
            row["qb"], row["qn"] = r.prompt.boundary.hex(), r.prompt.length
        if r.prompt.trims:
            row["qt"] = [k.hex() for k in r.prompt.trims]
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
    prompt = (Prompt(bytes.fromhex(row["q"]), bytes.fromhex(row.get("qb", "")),
                     int(row.get("qn", -1)), tuple(bytes.fromhex(k) for k in row.get("qt", ())))
              if "q" in row else None)
    recorded = Recorded(row["s"], path, bytes.fromhex(row.get("b", "")), int(row.get("n", -1)),
                        str(row.get("p", "")), int(row.get("c", 0)), row.get("m") == 1,
                        prompt, int(row.get("e", 0)))
    return recorded, at
