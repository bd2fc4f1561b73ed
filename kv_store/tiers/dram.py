"""The DRAM (performance) tier: each session's KV as a list of pieces of shared-memory segments,
in the order of the tier's eviction ledger.

A session's bytes are the concatenation of its pieces; appending a turn adds the turn's segments,
cutting a diverged tail shortens the list, and a session loaded from SSD is pieces of the file's
image. Nothing is copied to grow or shrink an entry. Capacity is the arena's: whole segments,
counted until their last holder lets go, so the arena says what fits (it fragments).

Every entry is in the ledger (its size, and the policy's order): which entry to drop is the
policy's call, when to drop (and what is pinned) is the store's. Inclusive with the SSD tier, so
dropping never writes anything. Not thread-safe: the store calls it under its lock.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection

from kv_store.eviction.ledger import TierLedger
from kv_store.tiers.shm_arena import Segment, ShmArena


@dataclass(frozen=True)
class ShmPiece:
    segment: Segment
    offset: int
    length: int


def window(pieces, skip: int, nbytes: int) -> list[ShmPiece]:
    """The pieces' bytes [skip, skip + nbytes), as pieces."""
    out: list[ShmPiece] = []
    for piece in pieces:
        if nbytes <= 0:
            break
        if skip >= piece.length:
            skip -= piece.length
            continue
        take = min(piece.length - skip, nbytes)
        out.append(piece if skip == 0 and take == piece.length else
                   ShmPiece(piece.segment, piece.offset + skip, take))
        skip, nbytes = 0, nbytes - take
    return out


class DramTier:
    def __init__(self, arena: ShmArena, ledger: TierLedger):
        self.arena = arena
        self.ledger = ledger  # each entry's size, in its policy's order
        self._entries: dict[str, list[ShmPiece]] = {}

    @property
    def capacity(self) -> int:
        return self.arena.capacity

    @property
    def used(self) -> int:
        return self.arena.used

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def size(self, session_id: str) -> int:
        return self.ledger.size(session_id)

    def put(self, session_id: str, pieces: list[ShmPiece], now: float) -> None:
        """Make `pieces` the session's bytes, a new entry; takes a reference on each segment."""
        self.drop(session_id)
        for piece in pieces:
            self.arena.ref(piece.segment)
        self._entries[session_id] = list(pieces)
        self.ledger.admit(session_id, sum(p.length for p in pieces), now)

    def write_at(self, session_id: str, offset: int, new: list[ShmPiece], now: float) -> None:
        """Keep bytes [0, offset) of the entry and put the `new` pieces after them (an access)."""
        kept = self.pieces(session_id, offset, take_refs=False)  # a trimmed last piece keeps
        for old in self._entries[session_id][len(kept):]:          # its segment's reference
            self.arena.unref(old.segment)
        for piece in new:
            self.arena.ref(piece.segment)
        self._entries[session_id] = kept + list(new)
        self.ledger.touch(session_id, now, offset + sum(p.length for p in new))

    def touch(self, session_id: str, now: float) -> None:
        """A read of the entry."""
        self.ledger.touch(session_id, now)

    def pieces(self, session_id: str, nbytes: int, take_refs: bool = True,
               skip: int = 0) -> list[ShmPiece]:
        """Pieces covering bytes [skip, nbytes) of the entry; with references a reader must
        `release` (so an eviction meanwhile cannot unlink them)."""
        out = window(self._entries.get(session_id, ()), skip, nbytes - skip)
        if take_refs:
            for piece in out:
                self.arena.ref(piece.segment)
        return out

    def release(self, pieces: list[ShmPiece]) -> None:
        for piece in pieces:
            self.arena.unref(piece.segment)

    def drop(self, session_id: str) -> int:
        """Forget the entry; returns its size (its segments go once nobody else holds them)."""
        if not self._release_entry(session_id):
            return 0
        return self.ledger.remove(session_id)

    def make_room(self, need: int, now: float, exclude: Collection[str],
                  on_evict: Callable[[str], None]) -> bool:
        """Evict the policy's victims (never one in `exclude`) until the arena can carve `need`
        bytes; False if it runs out of victims first."""
        def evict(victim: str) -> None:
            self._release_entry(victim)
            on_evict(victim)
        return self.ledger.make_room(need, now, exclude, fits=self.arena.fits, on_evict=evict)

    def _release_entry(self, session_id: str) -> bool:
        pieces = self._entries.pop(session_id, None)
        if pieces is None:
            return False
        self.release(pieces)
        return True
