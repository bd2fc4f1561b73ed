"""The stored responses on disk (`--state-dir`): a restarted scheduler still continues every
conversation a client follows by `previous_response_id`.

Kept in memory only, a scheduler restart (a crash, an upgrade, a pod's container restart)
turned every stored response into a 404, and a client of the Responses API had to resend its
whole history. One JSON line per stored response (its message, base64), per delete and per
read that renews an idle time, in a JournalFile (journal_file.py: appended, flushed, compacted
from the live store by a thread; mode 0600, since the lines hold what the users said). At start
the lines are replayed oldest first, each at the age it had (wall clock): responses idle past
the store's `ttl_s` are skipped, and the store's byte bound applies as it did when they came.

A read renews a response's idle time; writing every read down would add a line per link of a
chain at each turn, so a read is written only when the last note of that response is older
than an eighth of the TTL: after a restart a response may look up to that much more idle than
it was, never less.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import pathlib
import time
from typing import Callable, Iterator

from scheduler.journal_file import JournalFile
from scheduler.response_store import ResponseStore, StoredResponse

log = logging.getLogger("bidaw.scheduler")
FILE = "responses.jsonl"
NOTE_EVERY = 1 / 8  # of the TTL: how stale a response's last written use may get


class ResponseJournal:
    def __init__(self, directory: str, make_record: Callable[[bytes], StoredResponse],
                 compact_ratio: float = 2.0, min_compact_bytes: int = 1 << 20,
                 wall: Callable[[], float] = time.time):
        """`make_record`: a record from a stored message's bytes, as the service makes it."""
        self.file = JournalFile(pathlib.Path(directory) / FILE, "responses", compact_ratio,
                                min_compact_bytes)
        self.path = self.file.path
        self._make, self._wall = make_record, wall
        self._store: ResponseStore | None = None

    def load(self, store: ResponseStore) -> int:
        """Replay the file into `store`, open it for appending and follow the store's reads;
        returns the responses restored. Damaged lines (a write cut short) are skipped."""
        now, wall, damaged = store.clock(), self._wall(), 0
        for line in self.file.lines():
            try:
                row = json.loads(line)
                age = max(wall - float(row["t"]), 0.0)
                if "r" in row:
                    record = self._make(base64.b64decode(row["r"], validate=True))
                    record.noted = float(row["t"])
                    store.restore(record, now - age)  # a later read may renew it
                elif "d" in row:
                    store.delete(str(row["n"]), str(row["d"]))
                else:
                    store.restore_use(str(row["n"]), str(row["u"]), now - age)
            except (ValueError, KeyError, TypeError, RecursionError, binascii.Error):
                damaged += 1
        store.expire()
        self._store = store
        self.file.open(self._snapshot)
        store.on_use = self._used
        restored = len(store.records())
        log.info("stored responses: %d restored from %s%s", restored, self.path,
                 f" ({damaged} damaged lines skipped)" if damaged else "")
        return restored

    def put(self, record: StoredResponse) -> None:
        """`record` was stored (after `store.put` kept it)."""
        record.noted = self._wall()
        self.file.write(_put_line(record, record.noted), self._snapshot)

    def deleted(self, tenant: str, response_id: str) -> None:
        self.file.write(_line({"t": round(self._wall(), 3), "d": response_id, "n": tenant}),
                        self._snapshot)

    def close(self) -> None:
        self.file.close()

    def _used(self, record: StoredResponse) -> None:
        wall = self._wall()
        if wall - record.noted >= NOTE_EVERY * self._store.ttl_s:
            record.noted = wall
            self.file.write(_line({"t": round(wall, 3), "u": record.id, "n": record.tenant}),
                            self._snapshot)

    def _snapshot(self) -> Iterator[bytes]:
        """Every live response, each tenant's least recently used first, at its last use."""
        now, wall = self._store.clock(), self._wall()
        for record, used in self._store.records():
            yield _put_line(record, wall - (now - used))


def _put_line(record: StoredResponse, at: float) -> bytes:
    data = base64.b64encode(record.payload.SerializeToString()).decode()
    return _line({"t": round(at, 3), "r": data})


def _line(row: dict) -> bytes:
    return json.dumps(row, separators=(",", ":")).encode() + b"\n"
