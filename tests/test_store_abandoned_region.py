"""A region prepared for a co-located write that the worker gives up (its file gone, or not what
it asked for: it streams the KV instead) goes back to the store at once. It was kept for its
60-s lease, holding DRAM, and a store told to stop meanwhile waited for it to --drain-seconds.

A real store process, the worker's real KV client; the fault is the arena's file removed from
the shared-memory directory under the store (as a cleaner of /dev/shm would)."""
from __future__ import annotations

import os
import signal

from compute_worker.kv_client import KVClient
from kv_store.tiers.shm_arena import ARENA
from services.runtime.gen import common_pb2, kv_store_pb2
from tests.store_helpers import BPT, token_bytes
from tests.test_membership import wait_for
from tests.test_store_drain import _store


def leases(client: KVClient) -> int:
    return client.stub.Stats(kv_store_pb2.StoreStatsRequest(), timeout=10).leases


def test_a_released_prepared_region_is_not_waited_for_by_a_stopping_store(tmp_path):
    store = _store(tmp_path, "--drain-seconds", "60")
    client = KVClient(store.target)
    try:
        prepared = client.stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
            session_id="s", start_token=0, num_bytes=64 * BPT), timeout=10)
        assert prepared.lease_id and leases(client) == 1
        client.release(prepared.lease_id)  # the worker will not write into it after all
        assert leases(client) == 0
        os.kill(store.proc.pid, signal.SIGTERM)
        assert store.proc.wait(30) == 0  # it waited the 60 s for the region before
    finally:
        client.close()
        store.stop()


def test_a_write_whose_region_cannot_be_opened_streams_and_gives_the_region_back(tmp_path):
    store = _store(tmp_path)
    client = KVClient(store.target)
    tokens = list(range(100, 164))
    data = token_bytes("s", tokens)
    try:
        assert client.co_located
        info = client.stub.ShmInfo(kv_store_pb2.ShmInfoRequest(), timeout=10)
        os.unlink(os.path.join(info.dir, ARENA))  # the arena's file, gone under the store
        reply = client.write("s", 0, tokens, common_pb2.KV_FORMAT_KV, BPT, "m", data)
        assert reply.num_tokens == len(tokens)  # streamed instead
        assert bytes(client.read("s").data) == data
        wait_for(lambda: leases(client) == 0, timeout=10)  # the region it was given is back
    finally:
        client.close()
        store.stop()
