"""A queued turn's load that finds DRAM full of KV that cannot go yet (pinned for turns queued
ahead of it) waits for room instead of failing: the store parks it (`waiting_for_room`) and asks
for it again once room can be made, and the scheduler keeps the turn's place, running it from SSD
only when a worker slot is free and no ready turn arrived before it. Before, the load failed at
once and the turn read its KV from SSD inside its batch slot. A real store on real files, the
real scheduler and its queue, and a gRPC worker that answers Info only (one slot)."""
from __future__ import annotations

import os
import queue
import threading
import time

import pytest
from prometheus_client import REGISTRY

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from scheduler.config import SchedulerConfig
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool
from services.runtime.gen import (common_pb2, compute_worker_pb2, compute_worker_pb2_grpc,
                                  kv_store_pb2)
from services.runtime.grpc_util import Server
from tests.store_helpers import AwarenessStream, eventually

KV = common_pb2.KV_FORMAT_KV
MIB = 1 << 20


class OneSlotWorker(compute_worker_pb2_grpc.ComputeWorkerServicer):
    """What the scheduler asks a worker before dispatching to it: its slots."""

    def Info(self, request, context):
        return compute_worker_pb2.WorkerInfo(worker_id="w", max_running=1)


def fill(target, core, on_ssd=("t/wanted",), queued=("t/q1", "t/q2")):
    """DRAM (2 MiB) full of KV whose turns are queued; the sessions of `on_ssd` on SSD."""
    kv = KVClient(target)
    for sid in on_ssd:
        kv.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
        core.demote(sid)
    for sid in queued:
        kv.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
        core.on_arrival(sid)  # pinned before the next write needs room
    return kv


@pytest.fixture
def full_store(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=2 * MIB + 64 * 1024,
                                     promotion_hold_seconds=30.0))
    yield f"127.0.0.1:{server.port}", core
    server.stop(0)
    core.close()


def stats(kv):
    return kv.stub.Stats(kv_store_pb2.StoreStatsRequest())


def test_a_load_without_room_waits_and_lands_once_room_can_be_made(full_store):
    target, core = full_store
    kv = fill(target, core)
    stream = AwarenessStream(kv.stub)
    stream.next("snapshot")
    core.on_arrival("t/wanted")
    read_before = stats(kv).ssd_bytes_read
    kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/wanted"))
    assert stream.next("location", where=lambda e: e.session_id == "t/wanted"
                       and e.waiting_for_room).tier == common_pb2.TIER_SSD
    core.on_arrival("t/wanted")  # said again (a scheduler reconnecting): it keeps waiting
    assert stats(kv).loads_waiting_for_room == 1
    assert REGISTRY.get_sample_value("bidaw_kv_loads_waiting_for_room", {"kind": "demand"}) == 1
    assert stats(kv).ssd_bytes_read == read_before  # nothing read that would not fit
    with pytest.raises(queue.Empty):  # no word of it until it lands
        stream.next("load_finished", where=lambda e: e.session_id == "t/wanted", timeout=1.0)
    assert kv.read("t/q1").tier == common_pb2.TIER_DRAM  # q1's turn runs...
    core.on_turn_complete("t/q1", 20)                     # ...and its KV may go now
    assert stream.next("load_finished", where=lambda e: e.session_id == "t/wanted",
                       timeout=10).ok
    assert kv.lookup("t/wanted").tier == common_pb2.TIER_DRAM
    assert kv.lookup("t/q2").tier == common_pb2.TIER_DRAM  # still queued: kept
    assert stats(kv).loads_waiting_for_room == 0
    assert REGISTRY.get_sample_value("bidaw_kv_loads_waiting_for_room", {"kind": "demand"}) == 0
    stream.close()


def test_room_goes_to_the_waiting_load_of_highest_response_ratio_and_only_where_it_fits(
        full_store):
    # "t/old" (1 MiB) has waited longer, "t/small" (0.5 MiB) longer per byte (disk-HRRN:
    # 1 + wait / size): the 1 MiB that q1's end frees goes to t/small; t/old no longer fits
    # and keeps waiting, without a read (before: both were asked for, in the order they parked)
    target, core = full_store
    kv = fill(target, core, on_ssd=("t/old",))
    kv.write("t/small", 0, list(range(8)), KV, MIB // 16, "m", os.urandom(MIB // 2))
    core.demote("t/small")
    stream = AwarenessStream(kv.stub)
    stream.next("snapshot")
    core.on_arrival("t/old")
    time.sleep(0.3)
    core.on_arrival("t/small")
    for sid in ("t/old", "t/small"):
        kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id=sid))
        assert stream.next("location", where=lambda e: e.session_id == sid
                           and e.waiting_for_room).tier == common_pb2.TIER_SSD
    time.sleep(0.6)  # t/small: 0.6 s / 0.5 MiB, t/old: 0.9 s / 1 MiB
    read_before = stats(kv).ssd_bytes_read
    core.on_turn_complete("t/q1", 20)  # its KV may go now: 1 MiB of room
    assert stream.next("load_finished", where=lambda e: e.session_id == "t/small",
                       timeout=10).ok
    time.sleep(1.5)  # three more rounds of asking again
    assert kv.lookup("t/old").tier == common_pb2.TIER_SSD
    assert stats(kv).loads_waiting_for_room == 1
    read = stats(kv).ssd_bytes_read - read_before
    assert MIB // 2 <= read < MIB  # t/small's file (with its header); t/old was never read
    stream.close()


def test_a_waiting_load_ends_unloaded_when_its_time_is_up_or_its_turn_is_gone(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=2 * MIB + 64 * 1024,
                                     promotion_hold_seconds=1.0))
    try:
        kv = fill(f"127.0.0.1:{server.port}", core, on_ssd=("t/late", "t/left"))
        stream = AwarenessStream(kv.stub)
        stream.next("snapshot")
        read_before = stats(kv).ssd_bytes_read
        core.on_arrival("t/late")
        kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/late"))
        began = time.monotonic()
        done = stream.next("load_finished", where=lambda e: e.session_id == "t/late",
                           timeout=5)
        assert not done.ok and time.monotonic() - began > 0.9  # waited its second, then ran
        kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/left"))  # no turn queued
        assert not stream.next("load_finished", where=lambda e: e.session_id == "t/left",
                               timeout=5).ok
        assert stats(kv).loads_waiting_for_room == 0
        assert stats(kv).ssd_bytes_read == read_before
        stream.close()
    finally:
        server.stop(0)
        core.close()


def test_kv_larger_than_dram_fails_at_once_and_evicts_nothing(full_store):
    target, core = full_store
    kv = KVClient(target)
    kv.write("t/big", 0, list(range(48)), KV, MIB // 16, "m", os.urandom(3 * MIB))
    core.demote("t/big")
    kv.write("t/idle", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    stream = AwarenessStream(kv.stub)
    stream.next("snapshot")
    kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/big"))
    assert not stream.next("load_finished", where=lambda e: e.session_id == "t/big").ok
    assert kv.lookup("t/idle").tier == common_pb2.TIER_DRAM
    assert core.stats()["dram_evictions"] == 0 and stats(kv).loads_waiting_for_room == 0
    stream.close()


class Turns:
    """Turns queued at a scheduler with one worker slot, each waiting for dispatch."""

    def __init__(self, service):
        self.service = service
        self.active = True
        self.threads: list[threading.Thread] = []
        self.order: list[str] = []  # sessions in the order they were dispatched

    def add(self, session_id):
        pending = self.service.dispatcher.enqueue(session_id, time.monotonic())

        def wait():
            if self.service.dispatcher.wait(pending, lambda: self.active):
                self.order.append(session_id)
        self.threads.append(threading.Thread(target=wait))
        self.threads[-1].start()
        return pending

    def close(self):
        self.active = False
        for t in self.threads:
            t.join(5)


@pytest.fixture
def scheduler(full_store):
    target, core = full_store
    kv = fill(target, core, queued=())  # before the scheduler: its snapshot has it on SSD
    worker = Server("127.0.0.1:0", [(compute_worker_pb2_grpc.add_ComputeWorkerServicer_to_server,
                                     OneSlotWorker())], name="one-slot-worker")
    address = f"127.0.0.1:{worker.port}"
    pool = WorkerPool([address])
    service = SchedulerService(SchedulerConfig(store=target, workers=[address]), pool)
    service.stores.add(target)
    service.start()
    turns = Turns(service)
    try:
        assert eventually(lambda: service.stores.tier("t/wanted") == common_pb2.TIER_SSD)
        yield service, turns, core, kv
    finally:
        turns.close()
        service.stop()
        worker.stop(0)


def test_a_turn_whose_load_waits_for_room_is_loaded_before_it_runs(scheduler):
    service, turns, core, kv = scheduler
    busy = turns.add("t/busy")  # no KV: takes the one slot at once
    assert eventually(lambda: busy.dispatched.is_set())
    for sid in ("t/q1", "t/q2"):  # DRAM fills with KV of turns queued behind it
        kv.write(sid, 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
        core.on_arrival(sid)  # pinned before the next write (the stream says so a bit later)
        turns.add(sid)
    assert eventually(lambda: core.stats()["dram_sessions"] == 2)
    wanted = turns.add("t/wanted")
    assert eventually(lambda: service.stores.location("t/wanted").waiting_for_room)
    kv.read("t/q1")
    core.on_turn_complete("t/q1", 20)  # (as if q1 had run) its KV may go: room for wanted
    assert eventually(lambda: service.stores.tier("t/wanted") == common_pb2.TIER_DRAM,
                      timeout=10)
    assert not wanted.dispatched.is_set()  # loaded while its turn waited for the slot
    service.pool.release(busy.worker)
    service.dispatcher.wake()
    assert eventually(lambda: turns.order[:2] == ["t/busy", "t/q1"])


def test_a_turn_whose_load_waits_for_room_keeps_its_place_in_the_queue(scheduler):
    service, turns, core, kv = scheduler
    busy = turns.add("t/busy")
    assert eventually(lambda: busy.dispatched.is_set())
    kv.write("t/q1", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    kv.write("t/q2", 0, list(range(16)), KV, MIB // 16, "m", os.urandom(MIB))
    core.on_arrival("t/q1")  # pinned for turns queued elsewhere (another scheduler)
    core.on_arrival("t/q2")
    wanted = turns.add("t/wanted")  # arrives first, its KV on SSD and no room for it
    assert eventually(lambda: service.stores.location("t/wanted").waiting_for_room)
    later = turns.add("t/q2")  # arrives after it, its KV in DRAM: ready at once
    assert service.dispatcher.queue.lengths()["ready"] == 1
    service.pool.release(busy.worker)
    service.dispatcher.wake()
    assert eventually(lambda: wanted.dispatched.is_set())  # its place: before the later one
    assert not later.dispatched.is_set()
    assert service.stores.tier("t/wanted") == common_pb2.TIER_SSD  # its worker reads it


def test_a_waiting_load_asked_for_again_is_not_ended_while_it_queues(tmp_path):
    """Once room can be made the parked load is asked for again; while it queues behind
    another load (1 MiB at 1 MB/s, one at a time) the half-second retries leave it alone: its
    one LoadFinished says it landed."""
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=2 * MIB + 64 * 1024, ssd_read_gbps_cap=0.001,
                                     ssd_io_bytes=256 << 10, ssd_read_burst_bytes=0,
                                     promote_concurrency=1))
    try:
        kv = fill(f"127.0.0.1:{server.port}", core, on_ssd=("t/wanted", "t/other"))
        stream = AwarenessStream(kv.stub)
        stream.next("snapshot")
        core.on_arrival("t/wanted")
        kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/wanted"))
        assert stream.next("location", where=lambda e: e.session_id == "t/wanted"
                           and e.waiting_for_room)
        core.on_turn_complete("t/q1", 20)  # room for both
        core.on_turn_complete("t/q2", 20)
        core.on_arrival("t/other")
        kv.stub.Promote(kv_store_pb2.PromoteRequest(session_id="t/other"))  # reads ~1 s
        done = stream.next("load_finished", where=lambda e: e.session_id == "t/wanted",
                           timeout=10)
        assert done.ok
        assert kv.lookup("t/wanted").tier == common_pb2.TIER_DRAM
        assert kv.lookup("t/other").tier == common_pb2.TIER_DRAM
        stream.close()
    finally:
        server.stop(0)
        core.close()
