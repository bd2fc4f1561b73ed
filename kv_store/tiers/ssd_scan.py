"""A session file read by its headers only: the log (tokens, payload ranges) without the payloads,
how much of the file a read of its first tokens needs, and where a read of its last tokens must
start. Headers are small, so these cost a few short reads of a file, never its KV."""
from __future__ import annotations

import logging
import os
import pathlib
import stat
from typing import Callable

from kv_store.tiers import ssd_record
from kv_store.tiers.ssd_log import Piece, SessionLog
from kv_store.tiers.ssd_record import CorruptRecord

UNREAD = -1  # Piece.offset of bytes a suffix read leaves on the disk
log = logging.getLogger("bidaw.kv_store")


def scan_stored(path: pathlib.Path, path_of: Callable[[str], pathlib.Path]
                ) -> tuple[SessionLog, int] | None:
    """scan_file of an entry found in the tier at start-up, a torn or corrupt tail cut off (it
    was never acknowledged); None, with a WARNING, for an entry that is not a regular file (a
    directory; a FIFO, whose open would block the start for good) or cannot be read (EIO,
    EACCES): it is left where it is, and one such entry no longer stops the store's start."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            log.warning("SSD tier: %s is not a regular file: ignored", path)
            return None
        session_log, length = scan_file(path, path_of)
        if session_log.meta is not None and length < path.stat().st_size:
            os.truncate(path, length)
    except OSError as exc:
        log.warning("SSD tier: cannot read %s (%s): its session is not restored", path,
                    exc.strerror or exc)
        return None
    return session_log, length


def scan_file(path: pathlib.Path, path_of: Callable[[str], pathlib.Path],
              limit: int | None = None, stop_at_token: int = 0,
              records: list[tuple[int, int, int]] | None = None) -> tuple[SessionLog, int]:
    """The log of the file's first `limit` bytes (all) and its length. `path_of`: where a
    session's file lives (a file under another session's name is not its log).
    `stop_at_token` > 0: stop before the first record that starts at or past that token.
    `records`: filled with (offset, first token, past its last token) of each record applied."""
    log = SessionLog()
    size = path.stat().st_size if limit is None else limit
    with open(path, "rb") as fh:
        while log.end < size:
            fh.seek(log.end)
            try:
                head = fh.read(ssd_record.FIXED_SIZE)
                need = ssd_record.variable_size(head)
                header, payload_at = ssd_record.decode_header(head + fh.read(need))
            except CorruptRecord:
                break
            payload_at += log.end
            end = ssd_record.record_end(payload_at, header.payload_len)
            if end > size or not log.extends(header):
                break
            if log.meta is None and path_of(header.session_id) != path:
                break  # a file under another session's name
            if 0 < stop_at_token <= header.start_token:
                break
            if records is not None:
                records.append((log.end, header.start_token,
                                header.start_token + len(header.token_ids)))
            log.apply(header, payload_at, end)
    return log, log.end


def suffix_start(path: pathlib.Path, path_of: Callable[[str], pathlib.Path], token: int,
                 length: int) -> tuple[int, SessionLog] | None:
    """Where a read of tokens [token, ...) starts in the file, and the log of what is before it
    (its bytes marked UNREAD) for the read to continue; None if the file holds no such token.

    The start is the last record holding `token`: a record that starts at or before a token
    replaces it (or drops it), so every record after it starts past `token`, and the bytes of
    all later tokens lie in it or after it. Nor does any later record touch the tokens before
    that record's start, so the final log's first ones are what the read continues from (the
    record cuts the log there before it extends it): one pass over the headers."""
    records: list[tuple[int, int, int]] = []
    log, _ = scan_file(path, path_of, length, records=records)
    if log.meta is None or token >= log.meta.num_tokens:
        return None
    offset, first = max((off, first) for off, first, past in records if first <= token < past)
    seed = SessionLog()
    if offset > 0:
        seed.meta = log.meta.copy()
        del seed.meta.token_ids[first:]
        seed.pieces = [Piece(UNREAD, seed.meta.num_bytes)] if first else []
    return offset, seed


def record_edges(path: pathlib.Path, path_of: Callable[[str], pathlib.Path], length: int
                 ) -> list[int]:
    """The first tokens of the records the session's tokens come from, ascending (0 first;
    [] if unreadable): a read from one of them on starts at that record (suffix_start), and
    one of the tokens before it ends where the record begins (SsdTier.prefix_length)."""
    records: list[tuple[int, int, int]] = []
    try:
        scan_file(path, path_of, length, records=records)
    except OSError:
        return []
    edges, below = [], None
    for _, first, _ in reversed(records):  # a later record starting at or before it replaced it
        if below is None or first < below:
            edges.append(first)
            below = first
    return edges[::-1]
