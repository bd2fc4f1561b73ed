"""One lock per session, kept only while some turn of that session holds or waits for it.

A plain defaultdict(Lock) keeps an entry for every session ever seen, so the scheduler's memory
grows with the number of conversations served; here an entry goes when its last user leaves.
"""
from __future__ import annotations

import contextlib
import threading


class SessionLocks:
    def __init__(self):
        self._mutex = threading.Lock()
        self._locks: dict[str, list] = {}  # session -> [lock, turns holding or waiting]

    def __len__(self) -> int:
        with self._mutex:
            return len(self._locks)

    @contextlib.contextmanager
    def hold(self, session: str, timeout: float | None = None):
        """The session's lock, waited for at most `timeout` seconds (None: for ever);
        TimeoutError if it stayed taken."""
        with self._mutex:
            entry = self._locks.setdefault(session, [threading.Lock(), 0])
            entry[1] += 1
        try:
            wait = -1 if timeout is None else min(max(timeout, 0.0), threading.TIMEOUT_MAX)
            if not entry[0].acquire(timeout=wait):
                raise TimeoutError(f"session {session!r} stayed busy for {timeout:.1f} s")
            try:
                yield
            finally:
                entry[0].release()
        finally:
            with self._mutex:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[session]
