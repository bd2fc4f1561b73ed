"""ReadKV's hand-encoded data chunks are exactly protobuf's encoding, and the client's fast
parse reads them (and protobuf's own) back."""
from __future__ import annotations

import pytest

from compute_worker.kv_client import _data_chunk
from kv_store.chunk_wire import encode_data
from services.runtime.gen import kv_store_pb2


@pytest.mark.parametrize("size", [1, 127, 128, 300, 2 << 20])
@pytest.mark.parametrize("offset", [0, 1, 127, 128, 2 << 20, 1 << 40])
def test_encoding_matches_protobuf_and_parses_back(size, offset):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    wire = encode_data(data, offset)
    assert wire == kv_store_pb2.KVChunk(data=data, offset=offset).SerializeToString()
    got, got_offset = _data_chunk(wire)
    assert bytes(got) == data and got_offset == offset


def test_other_messages_are_left_to_protobuf():
    header = kv_store_pb2.KVChunk(header=kv_store_pb2.KVHeader(session_id="s"))
    assert _data_chunk(header.SerializeToString()) == (None, 0)
    assert _data_chunk(encode_data(b"abc", 5)[:-1]) == (None, 0)  # truncated
