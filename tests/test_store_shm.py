"""The co-located data plane over real gRPC and real shared memory: reads and writes through the
store's regions, the stream fallback, and regions kept under a lease until it ends."""
from __future__ import annotations

import os
import time

import grpc
import pytest

from compute_worker.kv_client import KVClient
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import store  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
BPT = 64 << 10
STORE_DEFAULTS = dict(eviction="lru")


def test_co_located_reads_and_writes_go_through_shared_memory(store):
    client, core = store(dram_bytes=64 << 20)
    assert client.co_located
    first, second = os.urandom(16 * BPT), os.urandom(8 * BPT)
    client.write("s", 0, list(range(16)), KV, BPT, "m", first)
    client.write("s", 16, list(range(16, 24)), KV, BPT, "m", second)
    got = client.read("s")
    assert got.tier == common_pb2.TIER_DRAM and got.data == first + second
    assert client.read("s", max_tokens=20).data == (first + second)[:20 * BPT]
    stats = core.stats()
    assert stats["shm_writes"] == 2 and stats["shm_reads"] == 2
    assert stats["dram_bytes"] == 24 * BPT  # exact: the two turns' regions, nothing else
    # ... the same bytes over the stream, as a worker on another machine gets them
    remote = KVClient(client.target, shared_memory=False)
    assert not remote.co_located and remote.read("s").data == first + second


def test_every_shared_memory_read_gives_its_lease_back(store):
    """The client releases a read's lease without waiting for the answer; a release whose call
    was dropped (gRPC cancels a garbage-collected future) held the pages until the lease
    expired, so DRAM filled with finished reads."""
    client, core = store(dram_bytes=64 << 20)
    client.write("s", 0, list(range(4)), KV, BPT, "m", os.urandom(4 * BPT))
    for _ in range(40):
        assert client.read("s").tier == common_pb2.TIER_DRAM
    deadline = time.monotonic() + 10
    while core.stats()["leases"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert core.stats()["leases"] == 0 and core.stats()["shm_reads"] == 40


def test_a_session_that_does_not_fit_is_read_over_the_stream(store):
    client, core = store(dram_bytes=4 * BPT)
    data = os.urandom(8 * BPT)
    reply = client.write("big", 0, list(range(8)), KV, BPT, "m", data)
    assert reply.tier == common_pb2.TIER_SSD and reply.durable
    got = client.read("big")
    assert got.tier == common_pb2.TIER_SSD and got.data == data
    assert core.stats()["shm_reads"] == 0


def test_no_room_in_shared_memory_reads_the_ssd_once(store):
    client, core = store(dram_bytes=8 * BPT)
    data = os.urandom(6 * BPT)
    client.write("cold", 0, list(range(6)), KV, BPT, "m", data)
    client.write("hot", 0, list(range(4)), KV, BPT, "m", os.urandom(4 * BPT))  # evicts cold
    lease = client.stub.OpenShmRead(kv_store_pb2.OpenShmReadRequest(session_id="hot"))
    assert client.lookup("cold").tier == common_pb2.TIER_SSD
    before, file_bytes = core.stats()["ssd_bytes_read"], core.ssd.file_bytes["cold"]
    got = client.read("cold")  # hot's leased pages leave no room: refused before any read
    assert got.tier == common_pb2.TIER_SSD and got.data == data
    stats = core.stats()
    assert stats["ssd_bytes_read"] - before == file_bytes  # once, by the stream
    assert stats["shm_reads"] == 1  # only hot's
    client.release(lease.lease_id)


def test_a_leased_region_survives_eviction_until_released(store):
    client, core = store(dram_bytes=8 * BPT)
    a = os.urandom(4 * BPT)
    client.write("a", 0, list(range(4)), KV, BPT, "m", a)
    reply = client.stub.OpenShmRead(kv_store_pb2.OpenShmReadRequest(session_id="a"))
    (piece,) = reply.pieces

    def leased_bytes() -> bytes:
        return os.pread(core.arena.fd, piece.length, piece.offset)

    client.write("b", 0, list(range(2)), KV, BPT, "m", os.urandom(2 * BPT))
    # c needs 4: evicting a frees nothing while its region is leased, so b goes too.
    client.write("c", 0, list(range(4)), KV, BPT, "m", os.urandom(4 * BPT))
    assert client.lookup("a").tier == common_pb2.TIER_SSD
    assert client.lookup("b").tier == common_pb2.TIER_SSD
    assert leased_bytes() == a  # never freed or reused under the lease
    stats = core.stats()
    assert stats["dram_bytes_outside_entries"] == 4 * BPT and stats["dram_bytes"] == 8 * BPT
    client.release(reply.lease_id)
    assert core.stats()["dram_bytes"] == 4 * BPT
    d = os.urandom(4 * BPT)
    client.write("d", 0, list(range(4)), KV, BPT, "m", d)  # now a's pages may serve again
    assert client.lookup("d").tier == common_pb2.TIER_DRAM and leased_bytes() == d


def test_read_leases_and_prepared_regions_expire(store):
    client, core = store(dram_bytes=16 * BPT)
    client.write("a", 0, list(range(4)), KV, BPT, "m", os.urandom(4 * BPT))
    read = client.stub.OpenShmRead(kv_store_pb2.OpenShmReadRequest(session_id="a",
                                                                   lease_seconds=0.2))
    prepared = client.stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
        session_id="w", num_bytes=2 * BPT, lease_seconds=0.2))
    core.demote("a")  # evicted: only the read lease keeps its pages
    assert core.stats()["dram_bytes"] == 6 * BPT and core.stats()["leases"] == 2
    time.sleep(0.3)
    core.expire_leases()  # what the housekeeping thread does twice a second
    assert core.stats()["dram_bytes"] == 0 and core.stats()["leases"] == 0
    assert core.arena.fits(16 * BPT)  # every page free again, in one run
    with pytest.raises(grpc.RpcError):
        client.stub.ReleaseLease(kv_store_pb2.ReleaseLeaseRequest(lease_id=read.lease_id))
    header = kv_store_pb2.KVHeader(session_id="w", num_tokens=2, token_ids=[1, 2], format=KV,
                                   bytes_per_token=BPT, model="m", shm_region=prepared.region)
    with pytest.raises(grpc.RpcError) as err:
        client.stub.WriteKV(iter([kv_store_pb2.KVChunk(header=header)]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_async_write_replies_before_the_fsync_and_lands_on_ssd(store, tmp_path):
    client, core = store(dram_bytes=16 * BPT)
    data = os.urandom(8 * BPT)
    reply = client.write("s", 0, list(range(8)), KV, BPT, "m", data, durable=False)
    assert reply.tier == common_pb2.TIER_DRAM  # readable at once, durable or not yet
    assert client.read("s").data == data
    core.writer.wait("s")
    assert core.catalog.get("s").meta.num_tokens == 8
    # A write that DRAM cannot take is durable before the reply, whatever the writer allowed.
    reply = client.write("t", 0, list(range(32)), KV, BPT, "m", os.urandom(32 * BPT),
                         durable=False)
    assert reply.durable and reply.tier == common_pb2.TIER_SSD


def test_fragmented_shared_memory_is_used_whole_without_extra_evictions(store):
    client, core = store(dram_bytes=10 * BPT)
    data = {s: os.urandom(2 * BPT) for s in "abcde"}
    for s in "abcde":  # five 2-token entries fill the tier: a b c d e
        client.write(s, 0, [1, 2], KV, BPT, "m", data[s])
    core.on_session_end("b"), core.on_session_end("d")  # two free runs of 2, apart
    big = os.urandom(4 * BPT)
    client.write("f", 0, [1, 2, 3, 4], KV, BPT, "m", big)  # longer than either run
    assert core.stats()["dram_evictions"] == 0 and len(core.dram.pieces("f", 4 * BPT)) == 2
    assert client.read("f").data == big  # through shared memory, piece by piece
    assert KVClient(client.target, shared_memory=False).read("f").data == big
    # 3 tokens into a full tier: LRU evicts a then c, whose runs are apart (f lies between);
    # that is enough room, so nothing else goes
    third = os.urandom(3 * BPT)
    client.write("g", 0, [1, 2, 3], KV, BPT, "m", third)
    stats = core.stats()
    assert stats["dram_evictions"] == 2 and client.lookup("a").tier == common_pb2.TIER_SSD
    assert all(client.lookup(s).tier == common_pb2.TIER_DRAM for s in "efg")
    core.on_session_end("e")  # free runs now: one 1-token run and one 2-token run
    got = client.read("a")  # an SSD load (2 tokens + a header page) into both runs
    assert got.tier == common_pb2.TIER_SSD and got.data == data["a"]
    assert core.stats()["dram_evictions"] == 2 and client.lookup("a").tier == common_pb2.TIER_DRAM
    assert len({p.segment.name for p in core.dram.pieces("a", 2 * BPT)}) == 2
    assert client.read("a").data == data["a"]  # from DRAM now, the same bytes
