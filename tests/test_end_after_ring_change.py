"""Ending a session whose KV was written before a store shard joined (real store servers, real
files): the consistent hash now names the new shard, but the copy on the earlier owner is what
a turn would find again once the ring moves back (the new shard leaves, or dies). EndSession
must free it there too and say the session was known; before the fix it went to the new owner
alone, answered `known=False` (the gateway's 404 "never seen") and the ended conversation's KV
was reused by the next turn of the same session name after the new shard left."""
from __future__ import annotations

import pytest

from compute_worker.kv_client import KVClient
from kv_store.config import StoreConfig
from kv_store.main import start
from scheduler.config import SchedulerConfig
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool
from services.runtime.gen import common_pb2, scheduler_pb2
from services.runtime.hash_ring import HashRing
from tests.store_helpers import eventually

BPT = 4096


class Context:
    """What EndSession asks of its gRPC context: time left, and abort."""

    def time_remaining(self) -> float:
        return 10.0

    def abort(self, code, details):
        raise AssertionError(f"aborted: {code} {details}")


@pytest.fixture
def two_shards(tmp_path):
    made = []
    for name in ("a", "b"):
        server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path / name),
                                         dram_bytes=16 << 20))
        made.append((f"127.0.0.1:{server.port}", server, core))
    service = SchedulerService(SchedulerConfig(store="", workers=[]), WorkerPool([]))
    try:
        yield service, made[0][0], made[1][0]
    finally:
        service.stop()
        for _, server, core in made:
            server.stop(0)
            core.close()


def moved_session(a: str, b: str) -> str:
    """A session id that shard `a` owns alone and shard `b` takes once it joins."""
    ring = HashRing([a, b])
    return next(f"t/s-{i}" for i in range(1000) if ring.node_for(f"t/s-{i}") == b)


def write(target: str, session: str, tokens: int = 32) -> None:
    KVClient(target).write(session, 0, list(range(100, 100 + tokens)), common_pb2.KV_FORMAT_KV,
                           BPT, "m", bytes(tokens * BPT))


def tier(target: str, session: str) -> int:
    return KVClient(target).lookup(session).tier


def test_end_frees_the_copy_on_the_shard_that_owned_the_session_before_a_join(two_shards):
    service, a, b = two_shards
    session = moved_session(a, b)
    other = next(f"t/o-{i}" for i in range(1000)
                 if HashRing([a, b]).node_for(f"t/o-{i}") == b and f"t/o-{i}" != session)
    service.stores.add(a)
    write(a, session)  # a turn while `a` was the only shard
    write(a, other)
    assert eventually(lambda: service.stores.location(session) is not None)
    service.stores.add(b)  # scale out: the session now hashes to `b`, its KV stays on `a`
    assert eventually(lambda: service.stores.all_connected())
    assert service.stores.location(session) is None  # the owner's view: nothing there

    reply = service.EndSession(scheduler_pb2.EndSessionRequest(tenant="t", session_id=session),
                               Context())
    assert reply.known  # before: False, and the gateway answered 404 "never seen"
    assert eventually(lambda: tier(a, session) == common_pb2.TIER_NONE)
    assert tier(a, other) != common_pb2.TIER_NONE  # only the ended session was freed

    service.stores.remove(b)  # scale in: the ring moves the session back to `a` ...
    assert service.stores.location(session) is None
    assert not service.stores.holds(session)  # ... where nothing of the ended one is left
    assert tier(a, other) != common_pb2.TIER_NONE


def test_end_of_a_session_no_shard_holds_waits_for_no_confirmation(two_shards):
    service, a, b = two_shards
    service.stores.add(a)
    service.stores.add(b)
    assert eventually(lambda: service.stores.all_connected())
    reply = service.EndSession(scheduler_pb2.EndSessionRequest(tenant="t",
                                                               session_id="t/never"), Context())
    assert not reply.known
