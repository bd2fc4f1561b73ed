"""Bytes [0, n) laid over several buffers in order: one logical image, many memory regions.

The DRAM tier carves a session's bytes out of whatever free pages the arena has, so one write or
one SSD load may land in several regions. Demanding one contiguous run instead makes the store
evict far more than it needs once the arena is fragmented (sessions of 1-90 MiB come and go in a
few hundred MiB), and evicts by fragmentation rather than by the policy's order.
Every buffer but the last is used whole (regions are whole pages), so O_DIRECT accepts each.
"""
from __future__ import annotations

import bisect
from typing import Iterator


class Layout:
    """Where each byte of the image lies: buffers of the given lengths, back to back."""

    def __init__(self, lengths: list[int]):
        self.lengths = list(lengths)
        self._starts: list[int] = []
        pos = 0
        for n in self.lengths:
            self._starts.append(pos)
            pos += n
        self.total = pos

    def spans(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        """(buffer index, offset in it, length) covering [start, stop), in order."""
        stop = min(stop, self.total)
        i = bisect.bisect_right(self._starts, start) - 1
        while start < stop:
            local = start - self._starts[i]
            take = min(self.lengths[i] - local, stop - start)
            if take > 0:
                yield i, local, take
                start += take
            i += 1


class ScatterView:
    def __init__(self, views: list, nbytes: int | None = None):
        self.views = [memoryview(v).cast("B") for v in views]
        self.layout = Layout([len(v) for v in self.views])
        self.nbytes = self.layout.total if nbytes is None else nbytes
        if self.nbytes > self.layout.total:
            raise ValueError(f"{self.nbytes} bytes do not fit in buffers of {self.layout.total}")

    def __len__(self) -> int:
        return self.nbytes

    def spans(self, start: int, stop: int) -> Iterator[tuple[int, int, int]]:
        return self.layout.spans(start, min(stop, self.nbytes))

    def chunks(self, start: int, stop: int) -> Iterator[memoryview]:
        """Zero-copy views covering [start, stop), in order."""
        for i, local, take in self.spans(start, stop):
            yield self.views[i][local:local + take]

    def read(self, start: int, stop: int) -> bytes:
        """A copy of [start, stop) (small reads: record headers)."""
        return b"".join(self.chunks(start, stop))

    def write(self, start: int, data) -> None:
        data = memoryview(data).cast("B")
        pos = 0
        for chunk in self.chunks(start, start + len(data)):
            chunk[:] = data[pos:pos + len(chunk)]
            pos += len(chunk)
        if pos != len(data):
            raise ValueError("write runs past the end")
