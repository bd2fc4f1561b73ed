"""One store per SSD directory with the embedded index.

Two stores with the embedded (file-scanned) index over one data directory were both accepted:
each rebuilt its index from the files, then overwrote the files the other wrote (a misplaced
file is a miss, so answers stayed right, but the KV was lost for reuse and both tiers' counts
were wrong). A store with the embedded index holds an exclusive flock on `store.lock` inside its
directory for its life; a second one is refused at start, naming the directory and the holder's
pid. The kernel drops the lock however the holder ends (kill -9 included), so a restart after a
crash is never blocked. Replicas over one directory with the shared Redis index are intended,
and take no lock.
"""
from __future__ import annotations

import os
import pathlib

from services.runtime.pid_lock import Held, lock_with_pid

from kv_store import errors

LOCK_NAME = "store.lock"


class DirLock:
    """The exclusive lock on `directory` (made 0700 if missing), held until `release`."""

    def __init__(self, directory: str | os.PathLike):
        self._fd = -1
        root = pathlib.Path(directory)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        try:
            self._fd = lock_with_pid(root / LOCK_NAME)
        except Held as held:
            raise errors.precondition(
                f"--data-dir {root} is in use by another store (pid {held.holder}); stop it, or "
                "give this one its own --data-dir (replicas that share a directory need the "
                "shared index, --index redis://...)") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = -1

    def __del__(self):  # a store whose start failed after taking it
        self.release()
