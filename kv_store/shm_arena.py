"""Shared-memory regions the DRAM tier is made of: files on a tmpfs (/dev/shm) that the store owns.

A region (segment) is written once and never changed afterwards: a turn's new KV, or the image
of a session file loaded from SSD. Names are never reused (a per-process directory and a counter),
so a co-located worker that was handed a name can only ever read the bytes that name meant. A
segment is counted from creation until its last reference goes (the DRAM entry that holds it,
a lease of a worker reading it, an SSD write in flight), then unlinked: capacity accounting is
exact in bytes, including regions kept alive by leases after their entry was evicted.

The directory holds `.probe` with a random token: a client that can read the token back shares
this machine's /dev/shm (the same pod or host) and may use the regions directly.
"""
from __future__ import annotations

import itertools
import logging
import os
import pathlib
import re
import secrets
import shutil
import tempfile

log = logging.getLogger("bidaw.kv_store")
PROBE = ".probe"
_DIR_RE = re.compile(r"^bidaw-store-(\d+)-[0-9a-f]+$")


class Segment:
    __slots__ = ("name", "size", "refs")

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.refs = 1  # the creator's

    def __repr__(self) -> str:
        return f"Segment({self.name}, {self.size} B, {self.refs} refs)"


class ShmArena:
    """Not thread-safe: the store calls it under its lock."""

    def __init__(self, root: str, capacity: int):
        base = pathlib.Path(root) if root and os.path.isdir(root) else pathlib.Path(
            tempfile.gettempdir())
        sweep_stale(base)
        self.dir = base / f"bidaw-store-{os.getpid()}-{secrets.token_hex(6)}"
        self.dir.mkdir(mode=0o700)
        self.token = secrets.token_hex(16)
        (self.dir / PROBE).write_text(self.token)
        room = shutil.disk_usage(self.dir).free
        if capacity > room:
            log.warning("%s has %d bytes free, less than the DRAM tier's %d: capping it",
                        base, room, capacity)
            capacity = room
        self.capacity = capacity
        self.used = 0
        self._ids = itertools.count(1)

    def free(self) -> int:
        return self.capacity - self.used

    def path(self, segment: Segment) -> pathlib.Path:
        return self.dir / segment.name

    def create(self, nbytes: int) -> Segment:
        """A new zero-filled segment of `nbytes` (the caller made room for it)."""
        segment = Segment(f"r{next(self._ids):x}", nbytes)
        fd = os.open(self.path(segment), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, nbytes)  # tmpfs hands out pages as they are written
        finally:
            os.close(fd)
        self.used += nbytes
        return segment

    @staticmethod
    def ref(segment: Segment) -> Segment:
        segment.refs += 1
        return segment

    def unref(self, segment: Segment) -> None:
        segment.refs -= 1
        if segment.refs == 0:
            self.path(segment).unlink(missing_ok=True)
            self.used -= segment.size

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def sweep_stale(base: pathlib.Path) -> None:
    """Remove the region directories of stores that died without cleaning up (kill -9)."""
    for entry in base.glob("bidaw-store-*"):
        match = _DIR_RE.match(entry.name)
        if not match or not entry.is_dir():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except PermissionError:
            pass  # alive, someone else's
