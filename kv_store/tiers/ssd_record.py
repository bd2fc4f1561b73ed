"""The on-disk record: one turn's new KV of one session, self-describing and checksummed.

    fixed header  <4s H B B I I Q Q H H I I>  magic, version, format, dtype, start_token,
                                              num_tokens, bytes_per_token, payload_len,
                                              session_len, model_len, header_crc, payload_crc
    session id (utf-8) | model name (utf-8) | token ids (int32 LE) | zeros to ALIGN
    payload (KV bytes) | zeros to ALIGN

Header and payload each start on an ALIGN (4 KiB) boundary, so a record is written and read with
O_DIRECT straight from and into page-aligned memory (the payload's pages in shared memory need no
copy). The padding costs at most 8 KiB per turn, against megabytes of KV per turn.

Two checksums: the header's lets start-up rebuild the index without reading payloads; the
payload's is checked on every read, so a flipped byte is a miss, never wrong KV.

The dtype byte (a KvDtype) was reserved, always 0, before dtypes were recorded: records written
then read as KvDtype.UNKNOWN, which no worker reuses (CUDA workers wrote bf16 KV then).
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

from kv_store.tiers.aligned_io import align_up

MAGIC = b"BDKV"
VERSION = 2  # 1: unaligned records (dropped at start-up: the tier is a cache, they recompute)
_FIXED = struct.Struct("<4sHBBIIQQHHII")
FIXED_SIZE = _FIXED.size
MAX_TOKENS = 1 << 24  # per record


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
    dtype: int = 0  # a KvDtype

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def encode_header(session_id: str, format: int, start_token: int, bytes_per_token: int,
                  model: str, token_ids: list[int], payload_len: int, payload_crc: int,
                  dtype: int = 0) -> bytes:
    """The header block, zero-padded to ALIGN; the payload goes right after it."""
    sid, mdl = session_id.encode(), model.encode()
    tokens = np.asarray(token_ids, dtype="<i4").tobytes()
    variable = sid + mdl + tokens
    fields = [MAGIC, VERSION, format, dtype, start_token, len(token_ids), bytes_per_token,
              payload_len, len(sid), len(mdl)]
    header_crc = zlib.crc32(variable, zlib.crc32(_FIXED.pack(*fields, 0, payload_crc)))
    head = _FIXED.pack(*fields, header_crc, payload_crc) + variable
    return head + bytes(align_up(len(head)) - len(head))


def record_end(payload_offset: int, payload_len: int) -> int:
    """Offset just past a record whose payload starts at `payload_offset`."""
    return payload_offset + align_up(payload_len)


def variable_size(fixed: bytes | memoryview) -> int:
    """Bytes of the variable part that follows a fixed header (checked by decode_header)."""
    if len(fixed) < FIXED_SIZE:
        raise CorruptRecord("truncated header")
    magic, version, _, _, _, ntok, _, _, slen, mlen, _, _ = _FIXED.unpack_from(fixed)
    if magic != MAGIC or version != VERSION:
        raise CorruptRecord("bad magic or version")
    if ntok > MAX_TOKENS:
        raise CorruptRecord("implausible token count")  # a flipped bit, not a 16M-token turn
    return slen + mlen + 4 * ntok


def decode_header(buf: bytes | memoryview, offset: int = 0) -> tuple[RecordHeader, int]:
    """Parse the header at `offset`; returns it and the (aligned) offset of its payload."""
    if len(buf) - offset < FIXED_SIZE:
        raise CorruptRecord("truncated header")
    (magic, version, format, dtype, start, ntok, bpt, plen, slen, mlen, header_crc,
     payload_crc) = _FIXED.unpack_from(buf, offset)
    if magic != MAGIC or version != VERSION:
        raise CorruptRecord("bad magic or version")
    var_start = offset + FIXED_SIZE
    var_end = var_start + slen + mlen + 4 * ntok
    if len(buf) < var_end:
        raise CorruptRecord("truncated header")
    variable = bytes(buf[var_start:var_end])
    fixed = _FIXED.pack(magic, version, format, dtype, start, ntok, bpt, plen, slen, mlen, 0,
                        payload_crc)
    if zlib.crc32(variable, zlib.crc32(fixed)) != header_crc:
        raise CorruptRecord("header checksum mismatch")
    if plen != ntok * bpt:
        raise CorruptRecord("payload length does not match tokens")
    sid = variable[:slen].decode()
    model = variable[slen:slen + mlen].decode()
    tokens = np.frombuffer(variable, dtype="<i4", offset=slen + mlen, count=ntok).tolist()
    header = RecordHeader(sid, format, start, bpt, model, tokens, plen, payload_crc, dtype)
    return header, offset + align_up(var_end - offset)

