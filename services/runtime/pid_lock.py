"""An exclusive lock on a file that names its holder: the open descriptor holds a flock, which
the kernel drops however the process ends (kill -9 included), and the file holds the pid, so a
second taker can say who has it."""
from __future__ import annotations

import fcntl
import os


class Held(Exception):
    """Another process holds the lock; `holder` is the pid it wrote ("?" if none)."""

    def __init__(self, holder: str):
        super().__init__(holder)
        self.holder = holder


def lock_with_pid(path: str | os.PathLike) -> int:
    """The descriptor holding the lock on `path` (made 0600); Held if another process has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise Held(holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
