"""A prepared load reads the history end first (kv_store/end_first.py), over real gRPC and real
files on a disk capped to ~4 MB/s: each part it lands is published, a turn's suffix read takes
the landed end at once with the right bytes and the load stops there (its head never read), a
suffix read below the landed start waits for the parts it needs, and a load nobody takes lands
whole in DRAM with every byte right and none read twice."""
from __future__ import annotations

import time

from kv_store.load_parts import cut_points
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import AwarenessStream, eventually, store, token_bytes  # noqa: F401

KV = common_pb2.KV_FORMAT_KV
BPT = 64 << 10
TURNS = [list(range(t * 64, t * 64 + 64)) for t in range(4)]  # four records of 4 MiB


def prepared_on_ssd(store):
    client, core = store(dram_bytes=48 << 20, promote_concurrency=1, ssd_read_gbps_cap=0.004,
                         ssd_io_bytes=256 << 10)
    tokens: list[int] = []
    for turn in TURNS:
        client.write("p", len(tokens), turn, KV, BPT, "m",
                     token_bytes("p", tokens + turn, BPT)[len(tokens) * BPT:])
        tokens += turn
    core.demote("p")
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="p", announced=True))
    return client, core, stream, tokens


def landed(stream, below: int = 1 << 30) -> int:
    event = stream.next("location", timeout=20, where=lambda e: 0 < e.landed_from_token < below)
    return event.landed_from_token


def test_the_cuts_are_record_edges_last_first_each_part_at_least_a_quarter():
    assert cut_points([0, 64, 128, 192], 256) == [192, 128, 64]
    assert cut_points([0, 10, 100, 250], 256) == [100]  # 250..256 and 0..10 are too small
    assert cut_points([0], 256) == [] and cut_points([0, 200], 256) == []


def test_a_turn_arriving_mid_load_takes_the_landed_end_and_the_load_stops(store):
    client, core, stream, tokens = prepared_on_ssd(store)
    whole = core.stats()["ssd_bytes"]
    start = landed(stream)
    assert start == 192
    began = time.monotonic()
    got = client.read("p", start_token=start)  # the turn's reversed split
    assert time.monotonic() - began < 0.5  # not behind the parts still to read (~1 s each)
    assert got.start_token == start and got.token_ids == tokens
    assert bytes(got.data) == token_bytes("p", tokens, BPT)[start * BPT:]
    done = stream.next("load_finished", timeout=20)
    assert not done.ok  # it stopped: the session is not whole in DRAM ...
    assert time.monotonic() - began < 1.5  # ... at once, not after the ~3 s of reads left
    stats = core.stats()
    assert stats["prepared_handed_over"] == 1
    assert stats["ssd_bytes_read"] < whole * 3 // 4  # the head was never read
    assert client.lookup("p").tier == common_pb2.TIER_SSD
    got = client.read("p")  # the whole history is still there, from SSD
    assert bytes(got.data) == token_bytes("p", tokens, BPT)
    stream.close()


def test_a_suffix_read_below_the_landed_start_waits_for_the_parts_it_needs(store):
    client, core, stream, tokens = prepared_on_ssd(store)
    whole = core.stats()["ssd_bytes"]
    assert landed(stream) == 192
    got = client.read("p", start_token=100)  # needs the part from 64 on: waits for it
    assert bytes(got.data) == token_bytes("p", tokens, BPT)[100 * BPT:]
    assert not stream.next("load_finished", timeout=20).ok
    assert core.stats()["ssd_bytes_read"] < whole * 15 // 16  # tokens 0..64 never read
    assert core.stats()["prepared_handed_over"] == 1
    stream.close()


def test_a_load_nobody_takes_lands_whole_in_dram_end_first(store):
    client, core, stream, tokens = prepared_on_ssd(store)
    whole = core.stats()["ssd_bytes"]
    starts = [landed(stream, 1 << 30)]
    while starts[-1] > 64:
        starts.append(landed(stream, starts[-1]))
    assert starts == [192, 128, 64]
    assert stream.next("load_finished", timeout=20).ok
    assert client.lookup("p").tier == common_pb2.TIER_DRAM
    assert core.stats()["ssd_bytes_read"] <= whole  # no byte read twice
    got = client.read("p")
    assert got.tier == common_pb2.TIER_DRAM and bytes(got.data) == token_bytes("p", tokens, BPT)
    assert core.stats()["prepared_handed_over"] == 0
    assert eventually(lambda: core.stats()["leases"] == 0)
    stream.close()


def test_a_window_of_the_landed_end_is_served_too(store):
    """A prompt that matches only part of the history reads up to where it matches."""
    client, core, stream, tokens = prepared_on_ssd(store)
    assert landed(stream) == 192
    got = client.read("p", max_tokens=240, start_token=200)
    assert got.start_token == 200 and got.token_ids == tokens[:240]
    assert bytes(got.data) == token_bytes("p", tokens, BPT)[200 * BPT:240 * BPT]
    assert got.tier == common_pb2.TIER_DRAM and core.stats()["prepared_handed_over"] == 1
    stream.close()
