"""The Redis index with a real redis-server: a restarted store and a second replica over the same
data directory see one view, and a replica's stale DRAM copy is never served."""
from __future__ import annotations

import os

import pytest
import redis

from services.runtime.gen import common_pb2
from tests.redis_server import redis_url  # noqa: F401 (a fixture)
from tests.store_helpers import Stores

KV = common_pb2.KV_FORMAT_KV
BPT = 4096


@pytest.fixture
def replicas(tmp_path, redis_url):
    stores = Stores(tmp_path / "ssd", dram_bytes=1 << 20, eviction="lru", index=redis_url)
    yield stores
    stores.close()


def test_a_restart_takes_its_view_from_redis(replicas, redis_url):
    client, core = replicas()
    first, second = os.urandom(3 * BPT), os.urandom(2 * BPT)
    client.write("s", 0, [1, 2, 3], KV, BPT, "m", first)
    client.write("s", 3, [4, 5], KV, BPT, "m", second)
    replicas.stop(core)
    r = redis.Redis.from_url(redis_url)
    assert r.sismember("bidaw:kv:sessions", "s") and int(r.hget("bidaw:kv:s:s", "ver")) == 2
    client, core = replicas()
    assert core.catalog.kind == "redis" and core.stats()["index"] == "redis"
    got = client.read("s")
    assert got.token_ids == [1, 2, 3, 4, 5] and got.data == first + second


def test_two_replicas_share_one_view(replicas):
    a, _ = replicas()
    b, _ = replicas()
    one = os.urandom(2 * BPT)
    a.write("s", 0, [1, 2], KV, BPT, "m", one)
    assert a.lookup("s").tier == common_pb2.TIER_DRAM  # a keeps it in its own DRAM
    info = b.lookup("s")  # b never saw the write, yet knows the session
    assert info.tier == common_pb2.TIER_SSD and list(info.token_ids) == [1, 2]
    assert b.read("s").data == one
    two = os.urandom(BPT)
    b.write("s", 2, [3], KV, BPT, "m", two)  # the session moves on through b
    got = a.read("s")  # a drops its stale DRAM copy and reads what b wrote
    assert got.token_ids == [1, 2, 3] and got.data == one + two
    a.write("s", 1, [9], KV, BPT, "m", b"z" * BPT)  # a diverged history, through a
    got = b.read("s")
    assert got.token_ids == [1, 9] and got.data == one[:BPT] + b"z" * BPT
