"""Eviction in the live store: policies by name, fed by what the Awareness stream carries
(answer lengths, arrivals), never evicting KV under a lease until the lease expires."""
from __future__ import annotations

import time

import pytest

from kv_store.config import StoreConfig
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import AwarenessStream, eventually, store  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
DRAM, SSD = common_pb2.TIER_DRAM, common_pb2.TIER_SSD
SIZE = 64 << 10
STORE_DEFAULTS = dict(dram_bytes=2 * SIZE)


def put(client, sid):
    client.write(sid, 0, list(range(16)), KV, SIZE // 16, "m", bytes(SIZE))


@pytest.mark.parametrize("name", ["lru", "fifo", "queue-aware", "bidaw", "bidaw-size"])
def test_every_policy_evicts_by_name(store, name):
    client, core = store(eviction=name)
    for sid in ("a", "b", "c"):
        put(client, sid)
    stats = client.stub.Stats(kv_store_pb2.StoreStatsRequest())
    assert stats.eviction_policy == name and stats.dram_evictions == 1
    assert stats.dram_sessions == 2 and stats.dram_bytes == 2 * SIZE


def test_default_policy_is_bidaw_size():
    assert StoreConfig().eviction == "bidaw-size"


def test_answer_lengths_from_the_awareness_stream_drive_bidaw_size(store):
    client, core = store()  # the default
    put(client, "short")
    put(client, "long")  # most recent: LRU would keep it
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    stream.send(turn_complete=kv_store_pb2.TurnComplete(session_id="short", answer_tokens=5))
    stream.send(turn_complete=kv_store_pb2.TurnComplete(session_id="long", answer_tokens=2000))
    stream.send(arrival=kv_store_pb2.Arrival(session_id="new"))
    assert eventually(lambda: core.stats()["answers_observed"] == 2
                      and core.stats()["arrivals_observed"] == 1)
    put(client, "new")
    # A 2000-token answer takes long to read: that user comes back last, so its KV goes.
    assert client.lookup("long").tier == SSD and client.lookup("short").tier == DRAM
    stream.close()


def test_a_leased_session_is_not_evicted_until_the_lease_expires(store):
    client, core = store(eviction="lru")
    put(client, "a")
    lease = client.stub.Lookup(kv_store_pb2.LookupRequest(session_id="a", lease=True,
                                                          lease_seconds=0.3)).lease_id
    put(client, "b")
    put(client, "c")  # a is least recent, but leased: b goes
    assert client.lookup("a").tier == DRAM and client.lookup("b").tier == SSD
    time.sleep(0.35)
    put(client, "d")  # the lease expired: a goes now
    assert client.lookup("a").tier == SSD
    assert lease and core.stats()["leases"] == 0


def test_a_promote_of_kv_in_dram_pins_it_until_its_turn_reads_it(store):
    # a client's prepare (its user is typing) reaches the store as a Promote: KV already in
    # DRAM must then stay there for the turn, as KV the Promote loads does
    client, core = store(eviction="lru", promotion_hold_seconds=0.5)
    put(client, "typing")
    put(client, "b")
    reply = client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="typing"))
    assert reply.tier == DRAM
    put(client, "c")  # "typing" is least recent, but pinned: b goes
    assert client.lookup("typing").tier == DRAM and client.lookup("b").tier == SSD
    client.read("typing")  # its turn reads it: the pin has done its job
    put(client, "b")
    put(client, "d")  # LRU again: "typing" is least recent now
    assert client.lookup("typing").tier == SSD


def test_a_session_end_frees_kv_a_promote_pinned_at_once(store):
    # prepared (its user was typing), then the client ended the conversation instead: the pin
    # waits for a turn that will not come, so it must not keep the KV
    client, core = store(eviction="lru", promotion_hold_seconds=60)
    put(client, "prepared")
    client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="prepared", announced=True))
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    stream.send(session_end=kv_store_pb2.SessionEnd(session_id="prepared"))
    gone = stream.next("location", where=lambda e: e.session_id == "prepared")
    assert gone.tier == common_pb2.TIER_NONE
    assert client.lookup("prepared").tier == common_pb2.TIER_NONE and core.stats()["leases"] == 0
    stream.close()


def test_session_end_frees_its_kv_once_no_reader_holds_it(store):
    client, core = store(eviction="lru")
    put(client, "done")
    put(client, "held")
    put(client, "resumed")
    lease = client.lookup("held", lease=True).lease_id
    resumed = client.lookup("resumed", lease=True).lease_id
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    for sid in ("done", "held", "resumed"):
        stream.send(session_end=kv_store_pb2.SessionEnd(session_id=sid))
    gone = stream.next("location", where=lambda e: e.session_id == "done")
    assert gone.tier == common_pb2.TIER_NONE
    time.sleep(1.2)  # housekeeping ran twice: a leased session stays while it is read
    assert client.lookup("held").tier == DRAM and client.lookup("resumed").tier == DRAM
    # a new turn of "resumed" arrives: its client went on after all, the end is void
    stream.send(arrival=kv_store_pb2.Arrival(session_id="resumed"))
    assert eventually(lambda: core.stats()["arrivals_observed"] >= 1)
    client.release(lease)
    client.release(resumed)
    gone = stream.next("location", where=lambda e: e.session_id == "held")  # then it goes
    assert gone.tier == common_pb2.TIER_NONE and client.lookup("held").tier == common_pb2.TIER_NONE
    time.sleep(1.2)
    assert client.lookup("resumed").tier == DRAM
    stream.close()
