"""The DRAM (performance) tier: each session's KV as a list of pieces of shared-memory segments.

A session's bytes are the concatenation of its pieces; appending a turn adds the turn's segments,
cutting a diverged tail shortens the list, and a session loaded from SSD is pieces of the file's
image. Nothing is copied to grow or shrink an entry. Capacity is the arena's: whole segments,
counted until their last holder lets go.

It only holds bytes and counts them; which entry to drop is the eviction policy's call and when
to drop is the store's. Inclusive with the SSD tier, so dropping never writes anything.
Not thread-safe: the store calls it under its lock.
"""
from __future__ import annotations

from dataclasses import dataclass

from kv_store.tiers.shm_arena import Segment, ShmArena


@dataclass(frozen=True)
class ShmPiece:
    segment: Segment
    offset: int
    length: int


class DramTier:
    def __init__(self, arena: ShmArena):
        self.arena = arena
        self._entries: dict[str, list[ShmPiece]] = {}
        self._sizes: dict[str, int] = {}

    @property
    def capacity(self) -> int:
        return self.arena.capacity

    @property
    def used(self) -> int:
        return self.arena.used

    def free(self) -> int:
        return self.arena.free()

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def size(self, session_id: str) -> int:
        return self._sizes.get(session_id, 0)

    def put(self, session_id: str, pieces: list[ShmPiece]) -> None:
        """Make `pieces` the session's bytes; takes a reference on each segment."""
        self.drop(session_id)
        for piece in pieces:
            self.arena.ref(piece.segment)
        self._entries[session_id] = list(pieces)
        self._sizes[session_id] = sum(p.length for p in pieces)

    def write_at(self, session_id: str, offset: int, new: list[ShmPiece]) -> None:
        """Keep bytes [0, offset) of the entry and put the `new` pieces after them."""
        kept = self.pieces(session_id, offset, take_refs=False)  # a trimmed last piece keeps
        for old in self._entries[session_id][len(kept):]:          # its segment's reference
            self.arena.unref(old.segment)
        for piece in new:
            self.arena.ref(piece.segment)
        self._entries[session_id] = kept + list(new)
        self._sizes[session_id] = offset + sum(p.length for p in new)

    def pieces(self, session_id: str, nbytes: int, take_refs: bool = True) -> list[ShmPiece]:
        """Pieces covering the first `nbytes` of the entry; with references a reader must
        `release` (so an eviction meanwhile cannot unlink them)."""
        out: list[ShmPiece] = []
        left = nbytes
        for piece in self._entries.get(session_id, ()):
            if left <= 0:
                break
            take = min(piece.length, left)
            out.append(piece if take == piece.length else
                       ShmPiece(piece.segment, piece.offset, take))
            left -= take
        if take_refs:
            for piece in out:
                self.arena.ref(piece.segment)
        return out

    def release(self, pieces: list[ShmPiece]) -> None:
        for piece in pieces:
            self.arena.unref(piece.segment)

    def drop(self, session_id: str) -> int:
        """Forget the entry; returns its size (its segments go once nobody else holds them)."""
        pieces = self._entries.pop(session_id, None)
        if pieces is None:
            return 0
        self.release(pieces)
        return self._sizes.pop(session_id)
