"""A turn that arrives while its KV is being loaded (here for a client's prepare): the scheduler
sees what is left of that load, not the estimate the store gave when it began, and recomputes
the history at once when that gives the earlier first token, as the timed simulator's turns do.
A real store reading through a bandwidth cap, the scheduler's real view and queue."""
from __future__ import annotations

import time

import pytest

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from scheduler.config import SchedulerConfig
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool
from services.runtime.gen import common_pb2
from tests.store_helpers import eventually

MIB = 1 << 20
TOKENS = 16


@pytest.fixture
def loading(tmp_path):
    """A scheduler whose session "t/s" (4 MiB of KV) is being read at 2 MB/s, for ~2 s."""
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=16 * MIB, ssd_read_gbps_cap=0.002,
                                     ssd_io_bytes=256 << 10))
    target = f"127.0.0.1:{server.port}"
    KVClient(target).write("t/s", 0, list(range(TOKENS)), common_pb2.KV_FORMAT_KV,
                           4 * MIB // TOKENS, "m", bytes(4 * MIB))
    core.demote("t/s")
    service = SchedulerService(SchedulerConfig(store=target, workers=[], restore_choice=True),
                               WorkerPool([]))
    service.stores.add(target)
    try:
        assert eventually(lambda: service.stores.tier("t/s") == common_pb2.TIER_SSD)
        assert service.stores.promote_tier("t/s", announced=True) == common_pb2.TIER_SSD
        assert eventually(lambda: service.stores.tier("t/s") == common_pb2.TIER_LOADING)
        yield service
    finally:
        service.stop()
        server.stop(0)
        core.close()


def trained(service, s_per_token: float) -> None:
    """The prefill cost the chooser learns from finished turns: 10 ms + s_per_token each."""
    for computed in (10, 200, 50, 800, 400, 30, 1000, 120):
        service.dispatcher.restore.observe(common_pb2.TurnSummary(
            prompt_tokens=computed + 500, cached_tokens=500, queue_s=0.0, kv_load_s=0.0,
            ttft_s=0.010 + s_per_token * computed))


def test_a_load_in_flight_is_seen_with_what_is_left_of_it(loading):
    first = loading.stores.location("t/s").load_estimate_s
    assert first > 1.0  # 4 MiB at 2 MB/s, less a 256 KiB burst
    time.sleep(0.5)
    left = loading.stores.location("t/s")
    assert left.tier == common_pb2.TIER_LOADING
    assert left.load_estimate_s == pytest.approx(first - 0.5, abs=0.2)


def test_a_turn_arriving_mid_load_recomputes_when_that_is_sooner(loading):
    trained(loading, 0.0005)  # 36 tokens: ~30 ms against ~2 s of load left
    pending = loading.dispatcher.enqueue("t/s", time.monotonic(), prompt_tokens=TOKENS + 20)
    try:
        assert pending.kv_max_tokens == 0
        assert loading.dispatcher.queue.lengths() == {"ready": 1, "waiting": 0, "loading": 0}
    finally:
        loading.dispatcher.cancel(pending)


def test_a_turn_arriving_mid_load_waits_for_it_when_recomputing_is_slower(loading):
    trained(loading, 0.5)  # 36 tokens: ~18 s
    pending = loading.dispatcher.enqueue("t/s", time.monotonic(), prompt_tokens=TOKENS + 20)
    try:
        assert pending.kv_max_tokens is None
        assert loading.dispatcher.queue.lengths() == {"ready": 0, "waiting": 0, "loading": 1}
        assert eventually(lambda: loading.dispatcher.queue.lengths()["ready"] == 1, timeout=15)
    finally:
        loading.dispatcher.cancel(pending)
