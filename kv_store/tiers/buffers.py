"""The bytes of one write on their way in, and of one read on their way out.

A write's bytes land in fresh shared-memory segments when the DRAM tier will keep them (then the
SSD write reads that very memory, page-aligned, with O_DIRECT), else in anonymous aligned memory.
A read hands out pieces of segments (DRAM) or of an aligned buffer the SSD tier filled; chunks for
a gRPC stream are read straight out of them.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from typing import Callable, Iterator

from kv_store.tiers.aligned_io import aligned_buffer
from kv_store.tiers.dram import ShmPiece
from kv_store.tiers.scatter import Layout, ScatterView
from kv_store.session_meta import SessionMeta
from kv_store.store_state import Tier
from kv_store.tiers.shm_arena import Segment, ShmArena


class Payload:
    """Incoming KV bytes: `write_at` fills them, `scatter` reads them (page-aligned)."""

    def __init__(self, nbytes: int, arena: ShmArena | None = None,
                 segments: list[Segment] | None = None):
        self.nbytes = nbytes
        self.segments = segments or []  # hold the creator's references until `release`
        self._arena = arena
        self._map: mmap.mmap | None = None if self.segments else aligned_buffer(nbytes)

    def write_at(self, offset: int, data: bytes) -> None:
        if not self.segments:
            self._map[offset:offset + len(data)] = data
            return
        data = memoryview(data).cast("B")
        pos = 0  # pwrite, not a mapping: a full tmpfs answers ENOSPC instead of SIGBUS
        for segment, local, take in self._spans(offset, offset + len(data)):
            os.pwrite(self._arena.fd, data[pos:pos + take], segment.offset + local)
            pos += take

    def pieces(self) -> list[ShmPiece]:
        """The bytes as pieces of the segments, in order."""
        return [ShmPiece(seg, local, take) for seg, local, take in self._spans(0, self.nbytes)]

    def scatter(self) -> ScatterView:
        """The bytes, page-aligned (the segments in the arena, or the buffer)."""
        if self.segments:
            return ScatterView([self._arena.view(s) for s in self.segments], self.nbytes)
        return ScatterView([self._map], self.nbytes)

    def _spans(self, start: int, stop: int):
        """(segment, offset in it, length) covering bytes [start, stop)."""
        layout = Layout([s.size for s in self.segments])
        for i, local, take in layout.spans(start, stop):
            yield self.segments[i], local, take

    def release(self, unref: Callable[[Segment], None] | None = None) -> None:
        """Let go of the memory (`unref` gives the segment references back, under the lock)."""
        self._map = None  # closed by the collector once no view is left
        if unref is not None:
            for segment in self.segments:
                unref(segment)
            self.segments = []


@dataclass
class ReadHandle:
    """What a read serves: the session's metadata (cut to the tokens served), the tier, and
    the pieces holding the bytes of tokens [start_token, meta.num_tokens); `release` must be
    called when the bytes were sent."""
    meta: SessionMeta
    tier: Tier
    shm: list[ShmPiece] = field(default_factory=list)  # DRAM: pieces of segments
    buffer: object = None  # SSD read that did not go to DRAM: the aligned buffer ...
    spans: list[tuple[int, int]] = field(default_factory=list)  # ... and (offset, length)s
    arena: ShmArena | None = None
    on_release: Callable[[], None] | None = None
    start_token: int = 0  # a suffix read: the first token whose bytes are served

    @property
    def num_tokens(self) -> int:
        """Tokens whose bytes are served."""
        return self.meta.num_tokens - self.start_token

    @property
    def nbytes(self) -> int:
        return self.num_tokens * self.meta.bytes_per_token

    def chunks(self, size: int) -> Iterator[bytes]:
        """The bytes in order, in chunks of at most `size`."""
        if self.buffer is not None:
            view = memoryview(self.buffer)
            for off, length in self.spans:
                for pos in range(off, off + length, size):
                    yield bytes(view[pos:min(pos + size, off + length)])
            return
        fd = self.arena.fd
        for piece in self.shm:
            start = piece.segment.offset + piece.offset
            end = start + piece.length
            for pos in range(start, end, size):
                yield os.pread(fd, min(size, end - pos), pos)

    def release(self) -> None:
        if self.on_release is not None:
            self.on_release()
            self.on_release = None
        self.buffer = None
