"""A turn waiting for its prepared load, read end first, is asked again when a part lands: with
the rest of the load slower than recomputing the beginning beside it, it takes the landed end
over and is ready at once. A real store reading four records through a 4 MB/s cap, the
scheduler's real view and queue."""
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
from tests.test_loading_arrival import trained

BPT = 64 << 10
TOKENS = 256  # four records of 64 tokens, 4 MiB each: ~1 s a record at 4 MB/s


@pytest.fixture
def prepared(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path),
                                     dram_bytes=48 << 20, ssd_read_gbps_cap=0.004,
                                     ssd_io_bytes=256 << 10, promote_concurrency=1))
    target = f"127.0.0.1:{server.port}"
    client = KVClient(target)
    for start_token in range(0, TOKENS, 64):
        client.write("t/s", start_token, list(range(start_token, start_token + 64)),
                     common_pb2.KV_FORMAT_KV, BPT, "m", bytes(64 * BPT))
    core.demote("t/s")
    service = SchedulerService(SchedulerConfig(store=target, workers=[], restore_choice=True),
                               WorkerPool([]))
    service.stores.add(target)
    try:
        assert eventually(lambda: service.stores.tier("t/s") == common_pb2.TIER_SSD)
        yield service
    finally:
        service.stop()
        server.stop(0)
        core.close()


def test_a_waiting_turn_takes_the_landed_end_over_when_a_part_lands(prepared):
    # 20 ms a token computed: all 276 tokens take ~5.5 s, more than the 4 s load, so the turn
    # arriving before anything landed waits. Once the end (192..256) is in, reading the other
    # 192 tokens takes ~3 s, and recomputing the first ~85 while the load brings the rest
    # meets it at ~1.7 s: it takes the end over.
    trained(prepared, 0.02)
    assert prepared.stores.promote_tier("t/s", announced=True) == common_pb2.TIER_SSD
    assert eventually(lambda: prepared.stores.tier("t/s") == common_pb2.TIER_LOADING)
    pending = prepared.dispatcher.enqueue("t/s", time.monotonic(), prompt_tokens=TOKENS + 20)
    try:
        assert pending.kv_max_tokens is None and pending.kv_suffix_from == 0
        assert prepared.dispatcher.queue.lengths()["loading"] == 1  # waits: nothing landed
        took = eventually(lambda: prepared.dispatcher.step() is not None
                          and pending.kv_suffix_from > 0, timeout=10)
        assert took and pending.landed_asked == 192
        assert 40 < pending.kv_suffix_from < 192  # the beginning, its end read as it lands
        assert pending.kv_max_tokens is None
        assert prepared.dispatcher.queue.lengths()["loading"] == 0
        assert time.monotonic() - pending.arrival < 2.5  # at the first part, not at the end
    finally:
        prepared.dispatcher.cancel(pending)
