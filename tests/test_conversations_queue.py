"""Queue placement: the KV that decides ready vs preparing is a branch's parent's while the branch
has none of its own; a turn that arrives while a load it did not start (a client's prepare) is
running is ready when that load ends. A real store and the scheduler's real queue."""
from __future__ import annotations

import threading
import time

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from scheduler.config import SchedulerConfig
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool
from services.runtime.gen import common_pb2
from tests.store_helpers import BPT, eventually, token_bytes


class Call:
    """The caller's side of a SubmitTurn as Dispatcher.wait sees it: active until it leaves."""

    def __init__(self):
        self.active = True

    def is_active(self) -> bool:
        return self.active


def test_a_branch_of_a_session_on_ssd_waits_in_the_preparing_queue(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=0))  # every session lives on SSD only
    target = f"127.0.0.1:{server.port}"
    tokens = list(range(1, 9))
    KVClient(target).write("t/parent", 0, tokens, common_pb2.KV_FORMAT_KV, BPT, "m",
                           token_bytes("t/parent", tokens))
    service = SchedulerService(SchedulerConfig(store=target, workers=[]), WorkerPool([]))
    service.stores.add(target)
    call, threads, queue = Call(), [], service.dispatcher.queue
    try:
        assert eventually(lambda: service.stores.tier("t/parent") == common_pb2.TIER_SSD)
        for session, parent in (("t/branch", "t/parent"), ("t/unrelated", "")):
            pending = service.dispatcher.enqueue(session, time.monotonic(), parent=parent)
            threads.append(threading.Thread(target=service.dispatcher.wait,
                                            args=(pending, call.is_active)))
            threads[-1].start()
        assert eventually(lambda: len(queue) == 2)
        assert queue.lengths()["waiting"] == 1  # the branch: its parent's KV is on SSD
        assert queue.lengths()["ready"] == 1  # nothing stored: runs at once
        assert queue.upcoming(2)[0] == "t/parent"  # the load to start is the parent's
    finally:
        call.active = False
        for t in threads:
            t.join(5)
        service.stop()
        server.stop(0)
        core.close()


def test_a_turn_arriving_while_a_prepare_loads_its_kv_runs_once_that_load_ends(tmp_path):
    # A client's prepare has started a load the scheduler did not start: the turn arrives while
    # its KV is LOADING, and must be ready once the store reports that load's end (it used to
    # wait for ever, loading, in the preparing queue). The load is too quick to catch in
    # flight here, so the view is set to what the store published at its start.
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=1 << 20))
    target = f"127.0.0.1:{server.port}"
    tokens = list(range(1, 9))
    KVClient(target).write("t/typing", 0, tokens, common_pb2.KV_FORMAT_KV, BPT, "m",
                           token_bytes("t/typing", tokens))
    core.demote("t/typing")
    service = SchedulerService(SchedulerConfig(store=target, workers=[]), WorkerPool([]))
    service.stores.add(target)
    call, queue, waiter = Call(), service.dispatcher.queue, None
    service.dispatcher.start(maintain=lambda: None)
    try:
        assert eventually(lambda: service.stores.tier("t/typing") == common_pb2.TIER_SSD)
        view = service.stores._shards[target][1]
        with view._lock:
            view.locations["t/typing"].tier = common_pb2.TIER_LOADING
        pending = service.dispatcher.enqueue("t/typing", time.monotonic())
        waiter = threading.Thread(target=service.dispatcher.wait, args=(pending, call.is_active))
        waiter.start()
        assert queue.lengths()["loading"] == 1
        time.sleep(0.3)  # the dispatcher starts no load of its own for it
        assert queue.lengths()["loading"] == 1
        assert service.stores.promote_tier("t/typing", announced=True) == common_pb2.TIER_SSD
        assert eventually(lambda: queue.lengths() == {"ready": 1, "waiting": 0, "loading": 0})
    finally:
        call.active = False
        if waiter is not None:
            waiter.join(5)
        service.stop()
        server.stop(0)
        core.close()
