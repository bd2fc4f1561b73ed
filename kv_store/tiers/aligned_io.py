"""Large aligned file I/O: O_DIRECT where the filesystem allows it, buffered I/O where it does not.

O_DIRECT skips the page cache (a KV file read once per promotion would only evict hotter pages)
but wants the buffer address, the file offset and the length aligned. Offsets and lengths are the
callers' job (records are laid out on ALIGN boundaries); buffers come from `aligned_buffer` (an
anonymous mmap is page aligned) or from a shared-memory mapping. A filesystem that refuses
O_DIRECT (EINVAL at open or on the first I/O) gets plain buffered I/O, same bytes, same offsets.
"""
from __future__ import annotations

import errno
import mmap
import os

ALIGN = 4096


def align_up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


IOV_MAX = 1024  # buffers one pwritev takes (Linux)


def aligned_buffer(nbytes: int) -> mmap.mmap:
    """Page-aligned anonymous memory of at least one page (mmap refuses length 0)."""
    return mmap.mmap(-1, max(align_up(nbytes), ALIGN))


class DirectFile:
    """An open file that tries O_DIRECT and falls back to buffered I/O on EINVAL."""

    def __init__(self, path: str | os.PathLike, flags: int, direct: bool = True, mode: int = 0o600):
        self.path = os.fspath(path)
        self.flags = flags
        self.direct = direct and hasattr(os, "O_DIRECT")
        self.fd = -1
        if self.direct:
            try:
                self.fd = os.open(self.path, flags | os.O_DIRECT, mode)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self.direct = False
        if self.fd < 0:
            self.fd = os.open(self.path, flags, mode)

    def _fallback(self) -> None:
        """The filesystem took O_DIRECT at open but refuses it on I/O: reopen buffered."""
        os.close(self.fd)
        self.fd = os.open(self.path, self.flags & ~(os.O_CREAT | os.O_TRUNC | os.O_EXCL))
        self.direct = False

    def _io(self, call, buffers: list, offset: int) -> int:
        """`call(fd, buffers, offset)`, once more without O_DIRECT if the kernel refuses it."""
        try:
            return call(self.fd, buffers, offset)
        except OSError as exc:
            if exc.errno != errno.EINVAL or not self.direct:
                raise
        self._fallback()
        return call(self.fd, buffers, offset)

    def pwrite_all(self, buffers: list, offset: int) -> int:
        """Write every buffer back to back at `offset`, retrying short writes."""
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        total = 0
        while views:
            n = self._io(os.pwritev, views[:IOV_MAX], offset + total)
            if n == 0:
                raise OSError(errno.EIO, "write made no progress")
            total += n
            while views and n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            if n:
                views[0] = views[0][n:]
        return total

    def pread_into(self, view: memoryview, offset: int) -> int:
        """Fill `view` from `offset`; returns the bytes read (fewer only at end of file)."""
        view = memoryview(view).cast("B")
        got = 0
        while got < len(view):
            n = self._io(os.preadv, [view[got:]], offset + got)
            if n == 0:
                break
            got += n
        return got

    def sync(self) -> None:
        os.fdatasync(self.fd)  # data and the file size: what a later read needs

    def truncate(self, length: int) -> None:
        os.ftruncate(self.fd, length)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "DirectFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def fsync_dir(path: str | os.PathLike) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
