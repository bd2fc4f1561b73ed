"""The KV store over real gRPC, with real files: tiers, appends, divergence, bad input."""
from __future__ import annotations

import os

import grpc
import pytest

from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import store  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
PAGE = 4096


def test_append_read_and_tiers(store):
    client, _ = store(dram_bytes=5 * PAGE)  # DRAM is counted in whole pages
    first, second = os.urandom(3 * PAGE), os.urandom(2 * PAGE)
    assert client.write("s", 0, [1, 2, 3], KV, PAGE, "m", first).tier == common_pb2.TIER_DRAM
    reply = client.write("s", 3, [4, 5], KV, PAGE, "m", second)
    assert (reply.num_tokens, reply.num_bytes) == (5, 5 * PAGE)
    got = client.read("s")
    assert got.tier == common_pb2.TIER_DRAM and got.data == first + second
    assert got.token_ids == [1, 2, 3, 4, 5]
    assert client.read("s", max_tokens=2).data == first[:2 * PAGE]
    # Growing past the DRAM bound leaves the session on SSD only, and reads come from there.
    client.write("s", 5, list(range(6)), KV, PAGE, "m", b"z" * 6 * PAGE)
    got = client.read("s")
    assert got.tier == common_pb2.TIER_SSD and got.data == first + second + b"z" * 6 * PAGE


def test_diverged_history_replaces_the_tail(store):
    client, _ = store(dram_bytes=0)
    client.write("s", 0, [1, 2, 3, 4], KV, 10, "m", b"a" * 40)
    client.write("s", 2, [7, 8, 9], KV, 10, "m", b"b" * 30)
    got = client.read("s")
    assert got.token_ids == [1, 2, 7, 8, 9] and got.data == b"a" * 20 + b"b" * 30


def test_survives_restart(store, tmp_path):
    client, first = store(dram_bytes=1 << 20)
    payload = os.urandom(4096)
    client.write("kept", 0, list(range(4)), KV, 1024, "m", payload)
    store.stop(first)
    client2, _ = store(dram_bytes=1 << 20)  # the store restarted over the same directory
    got = client2.read("kept")
    assert got.data == payload and got.tier == common_pb2.TIER_SSD


def test_dram_eviction_keeps_ssd_copy(store):
    client, core = store(dram_bytes=2 * PAGE + 100, eviction="lru")
    for name in "abc":
        client.write(name, 0, [1], KV, PAGE, "m", name.encode() * PAGE)
    assert core.stats()["dram_sessions"] == 2 and core.stats()["dram_evictions"] == 1
    assert client.lookup("a").tier == common_pb2.TIER_SSD  # the least recently used went
    assert client.read("a").data == b"a" * PAGE


def test_bad_input_gets_clear_status_and_store_keeps_serving(store):
    client, _ = store()
    with pytest.raises(grpc.RpcError) as err:
        client.read("never-written")
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "never-written" in err.value.details()

    def stream(*chunks):
        return client.stub.WriteKV(iter(chunks), timeout=10)

    header = kv_store_pb2.KVChunk(header=kv_store_pb2.KVHeader(
        session_id="w", num_tokens=2, token_ids=[1, 2], format=KV, bytes_per_token=4, model="m"))
    data = kv_store_pb2.KVChunk
    cases = {
        "no header": [data(data=b"xxxx", offset=0)],
        "gap": [header, data(data=b"xxxx", offset=4)],
        "short": [header, data(data=b"xxxx", offset=0)],
        "too long": [header, data(data=b"x" * 12, offset=0)],
        "two headers": [header, header],
    }
    for name, chunks in cases.items():
        with pytest.raises(grpc.RpcError) as err:
            stream(*chunks)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
    for bad in ({"session_id": ""}, {"format": 0}, {"start_token": 5}):
        fields = dict(session_id="w", start_token=0, format=KV)
        fields.update(bad)
        with pytest.raises(grpc.RpcError) as err:
            client.write(fields["session_id"], fields["start_token"], [1, 2], fields["format"],
                         4, "m", b"x" * 8)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, bad
    assert client.lookup("w").tier == common_pb2.TIER_NONE  # no rejected write stored a byte
    # ... and the store still serves
    client.write("w", 0, [1, 2], KV, 4, "m", b"x" * 8)
    assert client.read("w").data == b"x" * 8


def test_format_is_kept_in_the_record_header_and_the_lookup_reply(store):
    client, first = store()
    t6 = common_pb2.KV_FORMAT_TENSOR6
    client.write("h", 0, [1, 2], t6, PAGE, "opt", b"h" * 2 * PAGE)
    assert client.lookup("h").format == t6 and client.read("h").format == t6
    with pytest.raises(grpc.RpcError) as err:  # appending K/V to tensor-6 KV would mix them
        client.write("h", 2, [3], KV, PAGE, "opt", b"k" * PAGE)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    store.stop(first)
    client2, _ = store()  # restarted: the format comes back from the record header
    assert client2.lookup("h").format == t6 and client2.read("h").data == b"h" * 2 * PAGE
