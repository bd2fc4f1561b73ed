"""The memory of the DRAM tier: one file on a tmpfs (/dev/shm) that the store owns, carved into
page-aligned regions (segments).

One arena rather than a file per region, because a tmpfs hands out and zeroes pages on first
touch: a region carved from pages an evicted session left behind is ready to be written, while a
fresh file pays for every page again (on a busy machine that cost more than the disk read that
fills it). Pages, once touched, stay with the arena; it never holds more than its capacity.

A region is written once and never changed afterwards: (part of) a turn's new KV, or of the image
of a session file loaded from SSD. One write takes several regions when no free run is long
enough (`allocate`): nothing is ever evicted only to make pages contiguous. A region is counted
from creation until its last reference goes (the DRAM entry that holds it, a lease of a worker
reading it, an SSD write in flight): only then can its pages become another region, so a
co-located worker that holds a lease reads exactly the bytes the lease named. Capacity accounting
is exact: whole pages, including regions kept by leases after their entry was evicted.

The directory also holds `.probe` with a random token: a client that can read the token back
shares this machine's /dev/shm (the same pod or host) and may use the arena directly.

The store holds an exclusive flock on its arena for its life. The kernel drops it when the
process dies, however it dies (kill -9, and already while it is a zombie), so a store starting
up removes every arena nobody holds: the memory of a store that crashed comes back at once.
"""
from __future__ import annotations

import bisect
import fcntl
import itertools
import logging
import mmap
import os
import pathlib
import re
import secrets
import shutil
import tempfile
import time

from kv_store.tiers.aligned_io import align_up

log = logging.getLogger("bidaw.kv_store")
PROBE = ".probe"
ARENA = "arena"
_DIR_RE = re.compile(r"^bidaw-store-(\d+)-[0-9a-f]+$")


class Segment:
    __slots__ = ("name", "offset", "size", "span", "refs")

    def __init__(self, name: str, offset: int, size: int, span: int):
        self.name = name  # unique for the arena's life: how a prepared write is named
        self.offset = offset  # in the arena file, page-aligned
        self.size = size  # bytes asked for
        self.span = span  # pages taken
        self.refs = 1  # the creator's

    def __repr__(self) -> str:
        return f"Segment({self.name} @{self.offset}, {self.size} B, {self.refs} refs)"


class ShmArena:
    """Not thread-safe: the store calls it under its lock."""

    def __init__(self, root: str, capacity: int):
        base = pathlib.Path(root) if root and os.path.isdir(root) else pathlib.Path(
            tempfile.gettempdir())
        sweep_stale(base)
        self.dir = base / f"bidaw-store-{os.getpid()}-{secrets.token_hex(6)}"
        self.dir.mkdir(mode=0o700)
        self.token = secrets.token_hex(16)
        probe = os.open(self.dir / PROBE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(probe, "w") as fh:
            fh.write(self.token)
        room = shutil.disk_usage(self.dir).free
        if capacity > room:
            log.warning("%s has %d bytes free, less than the DRAM tier's %d: capping it",
                        base, room, capacity)
            capacity = room
        self.capacity = max(capacity, 0) // 4096 * 4096
        self.used = 0
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours while we live (sweep_stale)
        os.ftruncate(self.fd, self.capacity)  # a sparse file: pages come on first write
        # One mapping for the store's life: a page is faulted in once, not on every load.
        self._map = mmap.mmap(self.fd, self.capacity) if self.capacity else None
        self._ids = itertools.count(1)
        self._free = _Extents(self.capacity)

    @property
    def path(self) -> pathlib.Path:
        return self.dir / ARENA

    def free(self) -> int:
        return self.capacity - self.used

    def view(self, segment: Segment) -> memoryview:
        """The segment's pages in the store's own mapping (page-aligned: O_DIRECT can use it)."""
        return memoryview(self._map)[segment.offset:segment.offset + segment.span]

    def fits(self, nbytes: int) -> bool:
        """`allocate(nbytes)` would succeed now: enough free pages, wherever they lie."""
        return self.free() >= align_up(nbytes)

    def allocate(self, nbytes: int) -> list[Segment] | None:
        """Regions holding `nbytes` in order: one if a free run is that long, else the largest
        runs (all but the last used whole). None, and nothing taken, if the pages are not free."""
        if not self.fits(nbytes):
            return None
        one = self.create(nbytes)
        if one is not None:
            return [one]
        out: list[Segment] = []
        left = nbytes
        while left > 0:
            run = min(self._free.largest(), align_up(left))
            segment = self.create(min(run, left))
            out.append(segment)
            left -= segment.size
        return out

    def create(self, nbytes: int) -> Segment | None:
        """A new region of `nbytes` (None if no contiguous run of free pages is that long)."""
        span = align_up(max(nbytes, 1))
        offset = self._free.take(span)
        if offset is None:
            return None
        self.used += span
        return Segment(f"r{next(self._ids):x}", offset, nbytes, span)

    @staticmethod
    def ref(segment: Segment) -> Segment:
        segment.refs += 1
        return segment

    def unref(self, segment: Segment) -> None:
        segment.refs -= 1
        if segment.refs == 0:
            self._free.give(segment.offset, segment.span)
            self.used -= segment.span

    def close(self) -> None:
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view is still alive somewhere; the collector closes it
                pass
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        shutil.rmtree(self.dir, ignore_errors=True)


class _Extents:
    """Free runs of the arena: best fit on take, merged with their neighbours on give."""

    def __init__(self, size: int):
        self._by_size: list[tuple[int, int]] = []  # (length, start), sorted
        self._at: dict[int, int] = {}  # start -> length
        self._ending: dict[int, int] = {}  # end -> start
        if size > 0:
            self._add(0, size)

    def largest(self) -> int:
        return self._by_size[-1][0] if self._by_size else 0

    def take(self, length: int) -> int | None:
        i = bisect.bisect_left(self._by_size, (length, -1))
        if i == len(self._by_size):
            return None
        run, start = self._by_size[i]
        self._remove(start)
        if run > length:
            self._add(start + length, run - length)
        return start

    def give(self, start: int, length: int) -> None:
        before = self._ending.get(start)
        if before is not None:
            length += self._at[before]
            self._remove(before)
            start = before
        after = self._at.get(start + length)
        if after is not None:
            self._remove(start + length)
            length += after
        self._add(start, length)

    def _add(self, start: int, length: int) -> None:
        bisect.insort(self._by_size, (length, start))
        self._at[start] = length
        self._ending[start + length] = start

    def _remove(self, start: int) -> None:
        length = self._at.pop(start)
        del self._ending[start + length]
        del self._by_size[bisect.bisect_left(self._by_size, (length, start))]


CREATING_S = 10.0  # an arena this young may be between its mkdir and its flock


def sweep_stale(base: pathlib.Path) -> list[pathlib.Path]:
    """Remove the arenas of stores that died without cleaning up (kill -9); those removed.

    An arena is stale when no process holds its flock and its owner is gone: the pid in its
    name is not running (or is a zombie, or is this process, which has not made its own yet:
    a restarted container can get its predecessor's pid), or it is older than a creation takes.
    """
    removed = []
    for entry in base.glob("bidaw-store-*"):
        match = _DIR_RE.match(entry.name)
        if not match or not entry.is_dir():
            continue
        try:
            if _locked(entry / ARENA) or not (_owner_gone(int(match.group(1))) or
                                               time.time() - entry.stat().st_mtime > CREATING_S):
                continue
        except OSError:
            continue  # removed meanwhile, or not ours to look at
        log.info("removing the DRAM arena %s of a store that is gone", entry)
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _locked(arena: pathlib.Path) -> bool:
    try:
        fd = os.open(arena, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops our probe lock with it
    return False


def _owner_gone(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")
