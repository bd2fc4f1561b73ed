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

import fcntl
import os
import pathlib

from kv_store import errors

LOCK_NAME = "store.lock"


class DirLock:
    """The exclusive lock on `directory` (made 0700 if missing), held until `release`."""

    def __init__(self, directory: str | os.PathLike):
        self._fd = -1
        root = pathlib.Path(directory)
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise errors.precondition(
                f"--data-dir {root} is in use by another store (pid {holder}); stop it, or "
                "give this one its own --data-dir (replicas that share a directory need the "
                "shared index, --index redis://...)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = -1

    def __del__(self):  # a store whose start failed after taking it
        self.release()
