"""Prepared loads (a client's prepare: its user is typing) over real gRPC and real files: they
queue behind the loads of turns already waiting, a turn's arrival moves its own prepared load
up, and one that finds no room in DRAM is tried again once room can be made, while its pin's
time lasts. A load that cannot fit evicts nothing in vain."""
from __future__ import annotations

import os

from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import AwarenessStream, eventually, store  # noqa: F401 (a fixture)

KV = common_pb2.KV_FORMAT_KV
MIB = 1 << 20
STORE_DEFAULTS = dict(eviction="lru")


def on_ssd(client, core, names):
    for sid in names:
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    for sid in names:
        core.demote(sid)
        assert client.lookup(sid).tier == common_pb2.TIER_SSD


def promote(client, sid, announced=False):
    return client.stub.Promote(kv_store_pb2.PromoteRequest(session_id=sid, announced=announced))


def finished_order(stream, n):
    return [stream.next("load_finished", timeout=30).session_id for _ in range(n)]


def slow_store(store):
    """One load at a time, ~0.2 s each: requests made together are all queued at once."""
    return store(dram_bytes=16 * MIB, promote_concurrency=1, ssd_read_gbps_cap=0.004,
                 ssd_io_bytes=256 << 10)


def test_a_turn_already_waiting_is_loaded_before_turns_only_prepared(store):
    client, core = slow_store(store)
    on_ssd(client, core, ["p0", "a1", "a2", "d3"])
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    promote(client, "p0")  # running
    a1 = promote(client, "a1", announced=True).load_estimate_s
    promote(client, "a2", announced=True)
    d3 = promote(client, "d3").load_estimate_s
    assert finished_order(stream, 4) == ["p0", "d3", "a1", "a2"]
    assert d3 < a1 + 0.2  # the demand load's estimate counts no prepared load ahead of it
    assert all(client.lookup(s).tier == common_pb2.TIER_DRAM for s in ("a1", "a2", "d3"))
    stream.close()


def test_a_prepared_load_whose_turn_arrives_joins_the_demand_loads(store):
    client, core = slow_store(store)
    on_ssd(client, core, ["p0", "a1", "a2", "d3"])
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    promote(client, "p0")
    for sid in ("a1", "a2"):
        promote(client, sid, announced=True)
    core.on_arrival("a2")  # its user sent the turn: no longer a guess of when
    promote(client, "d3")
    assert finished_order(stream, 4) == ["p0", "a2", "d3", "a1"]
    stream.close()


def pinned_full(store, **config):
    """DRAM holding two sessions whose turns are queued (not evictable) and "wanted" on SSD."""
    client, core = store(dram_bytes=2 * MIB + 64 * 1024, **config)
    on_ssd(client, core, ["wanted"])
    for sid in ("q1", "q2"):
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
        core.on_arrival(sid)
    return client, core


def waiting(client):
    return client.stub.Stats(kv_store_pb2.StoreStatsRequest()).prepared_loads_waiting_for_room


def test_a_prepared_load_without_room_is_loaded_once_room_can_be_made(store):
    client, core = pinned_full(store)
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    read_before = core.stats()["ssd_bytes_read"]
    promote(client, "wanted", announced=True)
    assert stream.next("location", where=lambda e: e.session_id == "wanted"
                       and e.tier == common_pb2.TIER_SSD).waiting_for_room
    assert waiting(client) == 1 and core.stats()["ssd_bytes_read"] == read_before
    assert client.read("q1").tier == common_pb2.TIER_DRAM  # q1's turn runs...
    core.on_turn_complete("q1", 20)                         # ...and its KV may go now
    assert stream.next("load_finished", where=lambda e: e.session_id == "wanted",
                       timeout=10).ok
    assert client.lookup("wanted").tier == common_pb2.TIER_DRAM
    assert client.lookup("q1").tier == common_pb2.TIER_SSD  # the room the prepare took
    assert client.lookup("q2").tier == common_pb2.TIER_DRAM  # still queued: kept
    assert waiting(client) == 0
    stream.close()


def test_a_load_that_cannot_fit_now_evicts_nothing(store):
    client, core = store(dram_bytes=2 * MIB + 64 * 1024)
    client.write("big", 0, list(range(32)), KV, MIB // 16, "m", os.urandom(2 * MIB))
    core.demote("big")
    client.write("q1", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    core.on_arrival("q1")  # pinned: only "idle" below could go, and 2 MiB need both
    client.write("idle", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    promote(client, "big", announced=True)
    assert stream.next("location", where=lambda e: e.session_id == "big"
                       and e.tier == common_pb2.TIER_SSD).waiting_for_room
    assert client.lookup("idle").tier == common_pb2.TIER_DRAM  # not evicted for nothing
    assert core.stats()["dram_evictions"] == 0
    stream.close()


def test_a_waiting_prepared_load_is_dropped_when_its_session_ends_or_its_time_is_up(store):
    client, core = pinned_full(store, promotion_hold_seconds=1.0)
    promote(client, "wanted", announced=True)
    assert eventually(lambda: waiting(client) == 1)
    core.on_session_end("wanted")
    assert waiting(client) == 0
    read_before = core.stats()["ssd_bytes_read"]
    on_ssd(client, core, ["later"])
    promote(client, "later", announced=True)
    assert eventually(lambda: waiting(client) == 1)
    assert eventually(lambda: waiting(client) == 0, timeout=5)  # a second's pin, then given up
    core.on_turn_complete("q1", 20)  # room now, but nobody is typing any more
    core.on_turn_complete("q2", 20)
    assert not eventually(lambda: client.lookup("later").tier == common_pb2.TIER_DRAM,
                          timeout=1.5)
    assert core.stats()["ssd_bytes_read"] == read_before
