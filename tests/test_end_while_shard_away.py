"""A session ended while the KV store shard holding its KV is away (real store servers, real
files on disk): the shard hears of the end once it is back, and drops the KV. Before, with
several shards, a shard down, cut off or out of membership at the DELETE kept the ended
conversation's KV file on disk, and served it again to a session of that name."""
from __future__ import annotations

import logging
import pathlib
import time

import pytest

from kv_store.config import StoreConfig
from kv_store.main import start
from scheduler.config import SchedulerConfig
from scheduler.ended_sessions import EndedSessions
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool
from services.runtime.gen import common_pb2, scheduler_pb2
from services.runtime.hash_ring import HashRing
from tests.store_helpers import eventually
from tests.test_end_after_ring_change import Context, tier, write


class Shard:
    """A store server over its own data directory, stopped and started again on one port."""

    def __init__(self, data_dir: pathlib.Path):
        self.data_dir = data_dir
        self.server, self.core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(data_dir),
                                                   dram_bytes=16 << 20))
        self.target = f"127.0.0.1:{self.server.port}"

    def stop(self) -> None:
        if self.core is not None:
            self.server.stop(0)
            self.core.close()
            self.core = None

    def restart(self) -> None:
        self.server, self.core = start(StoreConfig(listen=self.target, data_dir=str(self.data_dir),
                                                   dram_bytes=16 << 20))

    def files(self) -> int:
        return len(list((self.data_dir / "sessions").glob("*/*.kv")))


@pytest.fixture
def shards(tmp_path):
    made = [Shard(tmp_path / "a"), Shard(tmp_path / "b")]
    service = SchedulerService(SchedulerConfig(store="", workers=[]), WorkerPool([]))
    try:
        yield service, *made
    finally:
        service.stop()
        for shard in made:
            shard.stop()


def owned_by(a: str, b: str, prefix: str) -> str:
    ring = HashRing([a, b])
    return next(f"t/{prefix}-{i}" for i in range(1000) if ring.node_for(f"t/{prefix}-{i}") == a)


def end(service: SchedulerService, session: str) -> float:
    """EndSession; how long it took."""
    began = time.monotonic()
    service.EndSession(scheduler_pb2.EndSessionRequest(tenant="t", session_id=session), Context())
    return time.monotonic() - began


def test_a_member_down_at_the_end_drops_the_kv_once_it_is_back(shards):
    service, a, b = shards
    session, kept = owned_by(a.target, b.target, "s"), owned_by(a.target, b.target, "k")
    service.stores.add(a.target)
    service.stores.add(b.target)
    write(a.target, session)
    write(a.target, kept)
    assert eventually(lambda: service.stores.location(session) is not None)
    files = a.files()
    a.stop()  # its Awareness stream breaks; it stays a member (a static --store shard)
    assert eventually(lambda: not service.stores.all_connected())

    assert end(service, session) < 2.0  # nothing to wait for from a shard that is down
    a.restart()  # same address, same data directory: the KV is still on its disk
    assert eventually(lambda: a.files() == files - 1, timeout=15)
    assert tier(a.target, session) == common_pb2.TIER_NONE  # a lookup misses
    assert tier(a.target, kept) != common_pb2.TIER_NONE  # only the ended session went
    assert service.stores.location(session) is None
    assert eventually(lambda: service.stores.ends.owed(a.target) == [])  # confirmed


def test_a_shard_out_of_membership_at_the_end_drops_the_kv_when_it_rejoins(shards):
    service, a, b = shards
    session = owned_by(a.target, b.target, "s")
    service.stores.add(a.target)
    service.stores.add(b.target)
    write(a.target, session)
    assert eventually(lambda: service.stores.location(session) is not None)
    a.stop()
    service.stores.remove(a.target)  # its heartbeats stopped: membership dropped it

    reply = service.EndSession(scheduler_pb2.EndSessionRequest(tenant="t", session_id=session),
                               Context())
    assert not reply.known  # no shard that is here holds it
    a.restart()
    assert a.files() == 1 and tier(a.target, session) != common_pb2.TIER_NONE  # still there
    service.stores.add(a.target)  # it registers again
    assert eventually(lambda: tier(a.target, session) == common_pb2.TIER_NONE, timeout=15)
    assert a.files() == 0
    assert service.stores.location(session) is None


def test_a_shard_never_seen_before_is_told_of_sessions_ended_and_not_used_again(shards):
    service, a, b = shards
    ended, reused, other = (owned_by(a.target, b.target, p) for p in ("e", "r", "o"))
    for session in (ended, reused, other):
        write(a.target, session)  # `a` held them before this scheduler started
    service.stores.add(b.target)
    assert eventually(lambda: service.stores.all_connected())
    end(service, ended)
    end(service, reused)
    service.stores.arrival(reused)  # a turn of that name again: its KV from now on is new

    service.stores.add(a.target)
    assert eventually(lambda: tier(a.target, ended) == common_pb2.TIER_NONE, timeout=15)
    assert service.stores.location(ended) is None
    assert eventually(lambda: service.stores.location(other) is not None)
    assert tier(a.target, reused) != common_pb2.TIER_NONE
    assert tier(a.target, other) != common_pb2.TIER_NONE
    assert a.files() == 2


def test_ends_past_the_bound_are_forgotten_oldest_first_with_a_warning(caplog):
    ends = EndedSessions(max_owed=2, max_ended=3)
    with caplog.at_level(logging.WARNING, logger="bidaw.scheduler"):
        for i in range(4):
            ends.ended(f"s{i}", ["x"])
    assert ends.owed("x") == ["s2", "s3"]
    assert ends.forgotten == 3  # two owed, one ended
    assert sum("forgotten" in r.getMessage() for r in caplog.records) == 1  # once, then held
    assert ends.on_snapshot("x", ["s3"]) == ["s3"]
    assert ends.owed("x") == ["s3"]  # s2 not listed: the shard holds nothing of it
    ends.confirmed("x", "s3")
    assert ends.owed("x") == []
    assert ends.on_snapshot("y", ["s0", "s1", "s2"]) == ["s1", "s2"]  # s0: forgotten
    ends.begun("s1")
    assert ends.on_snapshot("z", ["s1", "s2"]) == ["s2"]  # s1's name is in use again
