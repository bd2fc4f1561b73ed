"""The on-disk record: one turn's new KV of one session, self-describing and checksummed.

    fixed header  <4s H B B I I Q Q H H I I>  magic, version, format, reserved, start_token,
                                              num_tokens, bytes_per_token, payload_len,
                                              session_len, model_len, header_crc, payload_crc
    session id (utf-8) | model name (utf-8) | token ids (int32 LE) | payload (KV bytes)

Two checksums: the header's lets start-up rebuild the index without reading payloads; the
payload's is checked on every read, so a flipped byte is a miss, never wrong KV.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

MAGIC = b"BDKV"
VERSION = 1
_FIXED = struct.Struct("<4sHBBIIQQHHII")
FIXED_SIZE = _FIXED.size


class CorruptRecord(Exception):
    """A record whose bytes do not check out (torn write, flipped bits, foreign file)."""


@dataclass
class RecordHeader:
    session_id: str
    format: int
    start_token: int
    bytes_per_token: int
    model: str
    token_ids: list[int]
    payload_len: int
    payload_crc: int

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def encode(session_id: str, format: int, start_token: int, bytes_per_token: int, model: str,
           token_ids: list[int], payload: bytes | memoryview) -> bytes:
    sid, mdl = session_id.encode(), model.encode()
    tokens = np.asarray(token_ids, dtype="<i4").tobytes()
    variable = sid + mdl + tokens
    payload_crc = zlib.crc32(payload)
    fields = [MAGIC, VERSION, format, 0, start_token, len(token_ids), bytes_per_token,
              len(payload), len(sid), len(mdl)]
    header_crc = zlib.crc32(variable, zlib.crc32(_FIXED.pack(*fields, 0, payload_crc)))
    return _FIXED.pack(*fields, header_crc, payload_crc) + variable + bytes(payload)


def decode_header(buf: bytes | memoryview, offset: int = 0) -> tuple[RecordHeader, int]:
    """Parse the header at `offset`; returns it and the offset of its payload."""
    if len(buf) - offset < FIXED_SIZE:
        raise CorruptRecord("truncated header")
    (magic, version, format, _, start, ntok, bpt, plen, slen, mlen, header_crc,
     payload_crc) = _FIXED.unpack_from(buf, offset)
    if magic != MAGIC or version != VERSION:
        raise CorruptRecord("bad magic or version")
    var_start = offset + FIXED_SIZE
    var_end = var_start + slen + mlen + 4 * ntok
    if len(buf) < var_end:
        raise CorruptRecord("truncated header")
    variable = bytes(buf[var_start:var_end])
    fixed = _FIXED.pack(magic, version, format, 0, start, ntok, bpt, plen, slen, mlen, 0,
                        payload_crc)
    if zlib.crc32(variable, zlib.crc32(fixed)) != header_crc:
        raise CorruptRecord("header checksum mismatch")
    if plen != ntok * bpt:
        raise CorruptRecord("payload length does not match tokens")
    sid = variable[:slen].decode()
    model = variable[slen:slen + mlen].decode()
    tokens = np.frombuffer(variable, dtype="<i4", offset=slen + mlen, count=ntok).tolist()
    return RecordHeader(sid, format, start, bpt, model, tokens, plen, payload_crc), var_end


def check_payload(header: RecordHeader, payload: bytes | memoryview) -> None:
    if len(payload) != header.payload_len or zlib.crc32(payload) != header.payload_crc:
        raise CorruptRecord(f"payload checksum mismatch in session {header.session_id!r}")
