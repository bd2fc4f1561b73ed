"""Hand-made protobuf wire bytes and raw gRPC calls, for requests the generated classes refuse to
build: strings that are not UTF-8, varints past a field's width, truncated messages."""
from __future__ import annotations

import struct

import grpc

from services.runtime.grpc_util import channel

BAD_UTF8 = b"sess\xff\xfe\xc3("  # not UTF-8: a proto3 string field must be
MASK64 = (1 << 64) - 1


def varint(n: int) -> bytes:
    n &= MASK64  # negative int32/int64 go on the wire as 10-byte two's complement
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def uint(number: int, value: int) -> bytes:
    return tag(number, 0) + varint(value)


def blob(number: int, data: bytes) -> bytes:
    """A length-delimited field: string, bytes or a nested message."""
    return tag(number, 2) + varint(len(data)) + data


def f64(number: int, value: float) -> bytes:
    return tag(number, 1) + struct.pack("<d", value)


def f32(number: int, value: float) -> bytes:
    return tag(number, 5) + struct.pack("<f", value)


TRUNCATED = blob(1, b"abc")[:-2]  # says 3 bytes follow, 1 does: no message parses this


def status_of(target: str, method: str, kind: str, payload, timeout: float = 30.0,
              ) -> tuple[grpc.StatusCode, str]:
    """Call `method` with raw request bytes (a list of messages for a request stream); the
    status and its message. The channel has no serializer, so the bytes go as they are; it
    carries this process's cluster token (a deployment started here checks it)."""
    with channel(target) as ch:
        stub = getattr(ch, kind)(method)
        try:
            if kind == "unary_unary":
                stub(payload, timeout=timeout)
            elif kind == "unary_stream":
                for _ in stub(payload, timeout=timeout):
                    pass
            elif kind == "stream_unary":
                stub(iter(payload), timeout=timeout)
            else:
                for _ in stub(iter(payload), timeout=timeout):
                    pass
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""
