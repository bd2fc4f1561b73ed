"""The store's suffix read (a reversed load-or-recompute split: the worker recomputes a history's
first k tokens while the store reads the rest): over real gRPC and real files, a read from token
k returns exactly the bytes of tokens k.. with the ids of every token before the last, reads from
the SSD only the records from the one holding token k, leaves the session on SSD, and refuses a
start past the end with OUT_OF_RANGE, changing nothing."""
from __future__ import annotations

import grpc
import pytest

from compute_worker.kv_client import KVClient
from services.runtime.gen import common_pb2
from tests.store_helpers import BPT, eventually, store, token_bytes  # noqa: F401 (store: a fixture)
from tests.test_restore_prefix_read import KV, TURNS, _write_turns  # three appends
from tests.test_store_crash import flip, record_offsets
from kv_store.tiers.aligned_io import ALIGN


@pytest.mark.parametrize("shared_memory", [True, False])
def test_a_suffix_read_reads_only_the_records_from_its_start(store, shared_memory):
    client, core = store(dram_bytes=256 * BPT)
    tokens = _write_turns(client, "s")
    store.stop(core)
    client, core = store(dram_bytes=256 * BPT)  # restarted: the session is on SSD only
    client = KVClient(client.target, shared_memory=shared_memory)
    whole = core.stats()["ssd_bytes"]
    # k -> the first record read (0, 1 or 2 of TURNS)
    for k, first in ((1, 0), (29, 0), (30, 1), (49, 1), (50, 2), (89, 2)):
        before = core.stats()["ssd_bytes_read"]
        got = client.read("s", start_token=k)
        assert got.start_token == k and got.token_ids == tokens
        assert bytes(got.data) == token_bytes("s", tokens)[k * BPT:]
        read = core.stats()["ssd_bytes_read"] - before
        needed = sum(len(t) for t in TURNS[first:]) * BPT
        assert needed <= read < needed + len(TURNS) * 2 * ALIGN  # those records, each a header
        if first:
            assert read < whole - sum(len(t) for t in TURNS[:first]) * BPT + ALIGN
        assert client.lookup("s").tier == common_pb2.TIER_SSD  # not admitted
    got = client.read("s", max_tokens=60, start_token=40)  # a window of the history
    assert got.token_ids == tokens[:60]
    assert bytes(got.data) == token_bytes("s", tokens)[40 * BPT:60 * BPT]
    assert eventually(lambda: core.stats()["leases"] == 0)
    got = client.read("s")  # the whole session: read once and admitted, as before
    assert bytes(got.data) == token_bytes("s", tokens)
    assert client.lookup("s").tier == common_pb2.TIER_DRAM
    got = client.read("s", start_token=45)  # now from DRAM
    assert got.tier == common_pb2.TIER_DRAM and got.token_ids == tokens
    assert bytes(got.data) == token_bytes("s", tokens)[45 * BPT:]


def test_a_suffix_past_a_replaced_tail_reads_the_live_bytes(store):
    client, core = store(dram_bytes=0)
    client.write("d", 0, [1, 2, 3, 4], KV, 10, "m", b"a" * 40)
    client.write("d", 2, [7, 8, 9], KV, 10, "m", b"b" * 30)  # replaces tokens 2.. of the first
    client.write("d", 5, [5, 6], KV, 10, "m", b"c" * 20)
    ids = [1, 2, 7, 8, 9, 5, 6]
    for k, data in ((1, b"a" * 10 + b"b" * 30 + b"c" * 20), (2, b"b" * 30 + b"c" * 20),
                    (4, b"b" * 10 + b"c" * 20), (5, b"c" * 20), (6, b"c" * 10)):
        got = client.read("d", start_token=k)
        assert (got.token_ids, bytes(got.data)) == (ids, data), k


def test_a_start_past_the_end_is_refused_and_changes_nothing(store):
    client, core = store(dram_bytes=0)
    tokens = _write_turns(client, "s")
    for start, max_tokens in ((90, 0), (2 ** 31, 0), (40, 40), (50, 20)):
        with pytest.raises(grpc.RpcError) as err:
            client.read("s", max_tokens=max_tokens, start_token=start)
        assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE
        assert "start_token" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        client.read("nobody", start_token=3)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert bytes(client.read("s").data) == token_bytes("s", tokens)
    assert core.stats()["corrupt_records"] == 0


def test_a_corrupt_record_in_the_suffix_is_cut_and_the_beginning_kept(store):
    client, core = store(dram_bytes=0)  # every read comes from SSD
    tokens = _write_turns(client, "s")
    path = core.ssd.path("s")
    starts = record_offsets(path)
    flip(path, starts[2] + ALIGN + 100)  # the third turn's payload
    got = client.read("s", start_token=35)  # the second record checks out, the third does not
    assert got.token_ids == tokens[:50]
    assert bytes(got.data) == token_bytes("s", tokens[:50])[35 * BPT:]
    assert client.lookup("s").num_tokens == 50  # the bad record was cut off for good
    with pytest.raises(grpc.RpcError) as err:
        client.read("s", start_token=50)
    assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE
    flip(path, starts[1] + ALIGN + 100)  # now the second: a read from it finds nothing good
    with pytest.raises(grpc.RpcError) as err:
        client.read("s", start_token=35)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "recompute" in err.value.details()
    assert client.lookup("s").num_tokens == 30
    assert bytes(client.read("s").data) == token_bytes("s", tokens[:30])
