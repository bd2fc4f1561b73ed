"""Replaying a session file's records into the session's tokens and the file ranges holding them.

A session file is a log: each record carries tokens [start_token, start_token + n). A record that
starts at the stored count appends; one that starts lower replaces the tail from there on (a
conversation whose history diverged), so a divergence costs one append instead of a rewrite and
a crash mid-write leaves the previous state whole. The replaced bytes stay in the file as garbage
until compaction. Pure: no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kv_store.session_meta import SessionMeta
from kv_store.tiers.ssd_record import RecordHeader


@dataclass
class Piece:
    """`length` bytes at `offset` of a buffer (the file, or memory holding an image of it)."""
    offset: int
    length: int


@dataclass
class SessionLog:
    meta: SessionMeta | None = None
    pieces: list[Piece] = field(default_factory=list)
    end: int = 0  # offset just past the last record applied

    def extends(self, header: RecordHeader) -> bool:
        if self.meta is None:
            return header.start_token == 0
        return (header.session_id == self.meta.session_id
                and header.start_token <= self.meta.num_tokens
                and self.meta.compatible(header.format, header.bytes_per_token, header.model,
                                         header.dtype))

    def apply(self, header: RecordHeader, payload_offset: int, end: int) -> None:
        """Add a record (the caller checked `extends`) whose payload starts at `payload_offset`."""
        if self.meta is None:
            self.meta = SessionMeta(header.session_id, header.format, header.bytes_per_token,
                                    header.model, [], header.dtype)
        self.cut(header.start_token)
        self.meta.token_ids.extend(header.token_ids)
        if header.payload_len:
            self.pieces.append(Piece(payload_offset, header.payload_len))
        self.end = end

    def cut(self, tokens: int) -> None:
        """Keep only the first `tokens` tokens."""
        meta = self.meta
        if meta is None or tokens >= meta.num_tokens:
            return
        del meta.token_ids[tokens:]
        keep = tokens * meta.bytes_per_token
        kept: list[Piece] = []
        for piece in self.pieces:
            if keep <= 0:
                break
            kept.append(Piece(piece.offset, min(piece.length, keep)))
            keep -= piece.length
        self.pieces = kept

    def tail(self, tokens: int) -> list[Piece]:
        """The pieces holding the bytes of the tokens from `tokens` on."""
        skip = tokens * self.meta.bytes_per_token if self.meta is not None else 0
        out: list[Piece] = []
        for piece in self.pieces:
            if skip >= piece.length:
                skip -= piece.length
                continue
            out.append(Piece(piece.offset + skip, piece.length - skip))
            skip = 0
        return out
