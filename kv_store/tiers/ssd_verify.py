"""Verifying a session file's records as its bytes arrive: each header parsed and each payload
checksummed in file order, so a read stops at the first bad record and keeps what is before it."""
from __future__ import annotations

import zlib
from dataclasses import dataclass

from kv_store.tiers import ssd_record
from kv_store.tiers.scatter import ScatterView
from kv_store.tiers.ssd_log import SessionLog
from kv_store.tiers.ssd_record import CorruptRecord


@dataclass
class ReadResult:
    log: SessionLog  # tokens and the pieces of the buffer holding them
    valid_end: int  # bytes of the file that checked out
    corrupt: str = ""  # why the bytes after valid_end did not (empty: they all did)


class RecordChecker:
    """Parses and checksums records as the bytes before `available` arrive, in order."""

    def __init__(self, image: ScatterView, length: int, seed: SessionLog | None = None):
        """`seed`: the log of the file's records before the image's first byte (a suffix
        read), with nothing applied from the image yet."""
        self.image = image
        self.length = length
        self.log = seed or SessionLog()
        self.failed = ""
        self._header = None  # the record whose payload is being checksummed
        self._payload_at = 0
        self._crc = 0
        self._crc_pos = 0

    def advance(self, available: int) -> None:
        available = min(available, self.length)
        while not self.failed:
            if self._header is None:
                if self.log.end >= self.length:
                    return
                if not self._parse_header(available):
                    return
            if not self._checksum(available):
                return

    def _parse_header(self, available: int) -> bool:
        pos = self.log.end
        head = self.image.read(pos, min(available, pos + ssd_record.FIXED_SIZE))
        try:
            if len(head) < ssd_record.FIXED_SIZE:
                raise CorruptRecord("truncated header")
            need = ssd_record.FIXED_SIZE + ssd_record.variable_size(head)
            head = self.image.read(pos, min(available, pos + need))
            if len(head) < need:
                raise CorruptRecord("truncated header")
            header, payload_at = ssd_record.decode_header(head)
        except CorruptRecord as exc:
            if available >= self.length:
                self.failed = str(exc)
            return False  # more bytes may complete it
        if not self.log.extends(header):
            self.failed = "record does not continue the session"
            return False
        self._header = header
        self._payload_at = pos + payload_at
        self._crc, self._crc_pos = 0, self._payload_at
        if ssd_record.record_end(self._payload_at, header.payload_len) > self.length:
            self.failed = "record runs past the committed end"
            return False
        return True

    def _checksum(self, available: int) -> bool:
        header = self._header
        payload_end = self._payload_at + header.payload_len
        stop = min(available, payload_end)
        if stop > self._crc_pos:
            for chunk in self.image.chunks(self._crc_pos, stop):
                self._crc = zlib.crc32(chunk, self._crc)
            self._crc_pos = stop
        if self._crc_pos < payload_end:
            if available >= self.length:
                self.failed = "truncated payload"
            return False
        if self._crc != header.payload_crc:
            self.failed = f"payload checksum mismatch in session {header.session_id!r}"
            return False
        self.log.apply(header, self._payload_at,
                       ssd_record.record_end(self._payload_at, header.payload_len))
        self._header = None
        return True

    def result(self) -> ReadResult:
        if not self.failed and self.log.end < self.length:
            self.failed = "file shorter than its committed length"
        return ReadResult(self.log, self.log.end, self.failed)
