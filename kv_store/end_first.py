"""A prepared load read end first, and the end it has landed: a turn that arrives during the
load takes that end over (issue 18 §2).

A client's prepare loads a session before its turn arrives. Read from its beginning, a load still
running when the turn arrives leaves the turn two choices: wait for all of it, or recompute all
of it. Read end first, what has landed is the end of the history, which a reversed split reads:
the turn's worker reads from `start_token` at or past the landed start, recomputes the tokens
before it, and the load stops there (the disk time of the rest goes to other loads). A suffix
read below the landed start waits for the parts still to land.

The load goes in up to four parts cut at record edges (where: load_parts.py), last part first.
Each part lands in DRAM segments and is published (`landed_from_token` on the session's
location, for the scheduler's choice at arrival). When every part has landed they are one DRAM
entry, as after a whole read, without a copy.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kv_store.load_parts import cut_points
from kv_store.path_parts import PathParts
from kv_store.session_meta import SessionMeta
from kv_store.store_state import Tier
from kv_store.tiers import ssd_scan
from kv_store.tiers.buffers import ReadHandle
from kv_store.tiers.dram import ShmPiece, window
from kv_store.tiers.read_gate import ReadStopped

LANDED, HANDED_OVER, GAVE_UP = "landed", "handed_over", "gave_up"  # how a load ended


@dataclass
class Landed:
    meta: SessionMeta                  # the session as its load found it
    start: int                         # tokens [start, meta.num_tokens) have landed
    stop: threading.Event = field(default_factory=threading.Event)  # a turn took the end
    pieces: list[ShmPiece] = field(default_factory=list)  # their bytes, in order
    handles: list[ReadHandle] = field(default_factory=list)  # holding them until the load ends
    done: bool = False


class EndFirst:
    def __init__(self, parts: PathParts, read_part: Callable[..., ReadHandle],
                 landed: Callable[[str, int, int], None]):
        self.parts = parts
        self._read_part = read_part  # (session, max_tokens, start_token, stop) -> ReadHandle
        self._report = landed        # (session, first token landed, bytes before it)
        self._landed: dict[str, Landed] = {}
        self._cond = threading.Condition(parts.lock)

    def load(self, session_id: str) -> str | None:
        """Load the session end first (the caller holds its session lock, no write of it runs);
        None if it has no record edge to cut at (read it whole), else LANDED (in DRAM now),
        HANDED_OVER (a turn took the end and the load stopped) or GAVE_UP (no room, or the
        session changed)."""
        parts = self.parts
        with parts.lock:
            meta = parts.index.metas.get(session_id)
            length = parts.index.ssd.file_bytes.get(session_id, 0)
            version = parts.index.versions.get(session_id)
        ssd = parts.persister.ssd
        edges = ssd_scan.record_edges(ssd.path(session_id), ssd.path, length) if meta else []
        cuts = cut_points(edges, meta.num_tokens) if meta else []
        if not cuts:
            return None
        landed = Landed(meta.copy(), meta.num_tokens)
        with self._cond:
            self._landed[session_id] = landed
        try:
            top = 0  # the part's last token (0: to the end)
            for edge in cuts + [0]:
                handle = self._read_part(session_id, top, edge, landed.stop)
                with self._cond:
                    landed.handles.append(handle)
                    if not handle.shm:  # it found no room in DRAM: give up
                        return GAVE_UP
                    landed.pieces[:0] = handle.shm
                    landed.start = top = edge
                    self._cond.notify_all()
                self._report(session_id, edge, edge * meta.bytes_per_token)
                with parts.lock:
                    loc = parts.index.location(session_id)
                parts.events.publish(loc)
            with parts.lock:
                if parts.index.versions.get(session_id) != version or \
                        parts.writer.busy(session_id):
                    return GAVE_UP
                parts.dram.put(session_id, landed.pieces, time.monotonic())
                return LANDED
        except ReadStopped:
            return HANDED_OVER
        finally:
            with self._cond:
                del self._landed[session_id]
                landed.done = True
                self._cond.notify_all()
            for handle in landed.handles:
                handle.release()

    def covers(self, session_id: str, start_token: int) -> bool:
        """Whether a load end first is there to serve a read from `start_token` (> 0)."""
        with self._cond:
            return start_token > 0 and session_id in self._landed

    def serve(self, session_id: str, max_tokens: int, start_token: int) -> ReadHandle | None:
        """A suffix read (`start_token` > 0, up to `max_tokens` if > 0) of a session being
        loaded end first, served from the landed end once it reaches `start_token` (waiting
        for it meanwhile); the turn recomputes the tokens before it, so the load stops. None:
        not there to serve (no such load, or it ended first: the session is in DRAM or on
        SSD)."""
        with self._cond:
            landed = self._landed.get(session_id)
            stored = landed.meta.num_tokens if landed is not None else 0
            want = stored if max_tokens == 0 else min(max_tokens, stored)
            if landed is None or not 0 < start_token < want:
                return None
            while landed.start > start_token and not landed.done:
                self._cond.wait(1.0)
            if landed.done:
                return None
            landed.stop.set()
            self.parts.counters.prepared_handed_over += 1
            self.parts.counters.dram_hits += 1
            meta, bpt = landed.meta.copy(), landed.meta.bytes_per_token
            del meta.token_ids[want:]
            pieces = window(landed.pieces, (start_token - landed.start) * bpt,
                            (want - start_token) * bpt)
            for piece in pieces:
                self.parts.dram.arena.ref(piece.segment)
        return ReadHandle(meta, Tier.DRAM, shm=pieces, arena=self.parts.dram.arena,
                          on_release=lambda: self.parts.space.release_pieces(pieces),
                          start_token=start_token)
