"""Promotions over real gRPC: SSD -> DRAM loads under a bandwidth cap, at most N at once, in
request order, with load estimates and LoadFinished on the Awareness stream."""
from __future__ import annotations

import os
import threading
import time

from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import AwarenessStream, store  # noqa: F401 (store: a fixture)

KV = common_pb2.KV_FORMAT_KV
MIB = 1 << 20
STORE_DEFAULTS = dict(eviction="lru")


def on_ssd(client, core, names):
    data = {}
    for sid in names:
        data[sid] = os.urandom(MIB)
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", data[sid])
    for sid in names:  # evict them all: the scheduler sees them on SSD
        core.demote(sid)
        assert client.lookup(sid).tier == common_pb2.TIER_SSD
    return data


def test_promotion_loads_at_the_capped_rate_and_says_so(store):
    client, core = store(dram_bytes=8 * MIB, ssd_read_gbps_cap=0.01, ssd_io_bytes=256 << 10)
    data = on_ssd(client, core, ["a"])
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    reply = client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="a"))
    assert reply.tier == common_pb2.TIER_SSD and reply.load_estimate_s > 0
    loading = stream.next("location", where=lambda e: e.session_id == "a")
    assert loading.tier == common_pb2.TIER_LOADING
    done = stream.next("load_finished", where=lambda e: e.session_id == "a")
    assert done.ok and done.load_s > 0.05  # 1 MiB at 10 MB/s, less a 256 KiB burst: ~0.08 s
    got = client.read("a")
    assert got.tier == common_pb2.TIER_DRAM and got.data == data["a"]
    assert core.stats()["ssd_read_gbps_measured"] < 0.05  # it learnt the capped rate
    stream.close()


def test_promotions_run_in_order_at_most_n_at_once(store):
    client, core = store(dram_bytes=16 * MIB, promote_concurrency=1, ssd_read_gbps_cap=0.02,
                         ssd_io_bytes=256 << 10)
    names = ["p0", "p1", "p2", "p3"]
    on_ssd(client, core, names)
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    running, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            running.append(core.stats()["promotions_running"])
            stop.wait(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    estimates = [client.stub.Promote(kv_store_pb2.PromoteRequest(session_id=s)).load_estimate_s
                 for s in names]
    finished = [stream.next("load_finished", timeout=30).session_id for _ in names]
    stop.set()
    sampler.join()
    assert finished == names  # the scheduler's order (it ranks by disk-HRRN), kept
    assert estimates == sorted(estimates) and estimates[-1] > estimates[0]  # queued bytes count
    assert max(running) == 1
    assert all(client.lookup(s).tier == common_pb2.TIER_DRAM for s in names)
    stream.close()


def test_promoting_a_session_already_in_dram_is_a_no_op(store):
    client, _ = store(dram_bytes=8 * MIB)
    client.write("d", 0, [1], KV, 100, "m", b"x" * 100)
    reply = client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="d"))
    assert reply.tier == common_pb2.TIER_DRAM and reply.load_estimate_s == 0


def test_a_promoted_session_stays_in_dram_until_its_turn_reads_it(store):
    client, core = store(dram_bytes=3 * MIB)
    on_ssd(client, core, ["wanted"])
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="wanted"))
    assert stream.next("load_finished", where=lambda e: e.session_id == "wanted").ok
    # Newer sessions fill DRAM: LRU would drop "wanted" first, but the queued turn's pin holds.
    for sid in ("x", "y", "z"):
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    assert client.lookup("wanted").tier == common_pb2.TIER_DRAM
    assert client.read("wanted").tier == common_pb2.TIER_DRAM  # the turn reads it from DRAM
    for sid in ("u", "v", "w"):  # read once, the pin is gone: it ages out like any other
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    assert client.lookup("wanted").tier == common_pb2.TIER_SSD


def test_a_promotion_without_room_fails_fast_without_reading_the_ssd(store):
    client, core = store(dram_bytes=2 * MIB + 64 * 1024)
    on_ssd(client, core, ["wanted"])
    for sid in ("q1", "q2"):  # DRAM full of KV that queued turns need: not evictable
        client.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
        core.on_arrival(sid)
    read_before = core.stats()["ssd_bytes_read"]
    stream = AwarenessStream(client.stub)
    stream.next("snapshot")
    client.stub.Promote(kv_store_pb2.PromoteRequest(session_id="wanted"))
    assert not stream.next("load_finished", where=lambda e: e.session_id == "wanted").ok
    assert core.stats()["ssd_bytes_read"] == read_before  # nothing read just to be dropped
    assert {client.lookup(s).tier for s in ("q1", "q2")} == {common_pb2.TIER_DRAM}


def test_a_capped_disk_without_burst_is_no_faster_after_idle_time(store):
    """--ssd-read-burst-bytes 0: a read after idle time takes its bytes / the cap, where the
    default burst (one read) serves it at once."""
    took = {}
    for burst in (0, 8 * MIB):
        client, core = store(dram_bytes=8 * MIB, ssd_read_gbps_cap=0.004,
                             ssd_io_bytes=256 << 10, ssd_read_burst_bytes=burst)
        on_ssd(client, core, [f"idle{burst}"])
        time.sleep(0.3)  # idle: a bucket with a burst refills
        start = time.monotonic()
        assert client.read(f"idle{burst}").tier == common_pb2.TIER_SSD
        took[burst] = time.monotonic() - start
        store.stop(core)  # one store per directory: the next one is a restart
    assert took[0] > 0.2  # 1 MiB at 4 MB/s: ~0.26 s
    assert took[8 * MIB] < 0.15
