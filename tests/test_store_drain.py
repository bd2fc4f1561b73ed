"""A store told to stop (SIGTERM: Kubernetes, a rolling restart) drains: the KV writes in flight
finish and are on SSD after its restart, new calls are refused UNAVAILABLE saying why, and its
health says NOT_SERVING meanwhile. It stopped after a 2-s grace, so a worker streaming a turn's
KV then lost it, and the conversation recomputed its whole history at its next turn.

Real store processes over one data directory, a real client stream that is slow on purpose."""
from __future__ import annotations

import os
import signal
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime.gen import (common_pb2, kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2,
                                  scheduler_pb2_grpc)
from services.runtime.grpc_util import channel
from kv_store.drain import REFUSED
from tests.cluster import ServiceProcess
from tests.store_helpers import BPT, token_bytes

KV = common_pb2.KV_FORMAT_KV
SLOW_CHUNKS, CHUNK_GAP_S = 8, 0.5  # the slow write streams for 4 s: twice the old grace
HEALTH = health_pb2.HealthCheckResponse


def _store(tmp_path, *flags: str) -> ServiceProcess:
    (tmp_path / "shm").mkdir(exist_ok=True)
    return ServiceProcess("store", tmp_path, "--data-dir", str(tmp_path / "ssd"),
                          "--shm-dir", str(tmp_path / "shm"), "--dram-bytes", "48MiB",
                          "--eviction", "lru", *flags).wait()


def _header(session: str, tokens: list[int], **kw) -> kv_store_pb2.KVChunk:
    return kv_store_pb2.KVChunk(header=kv_store_pb2.KVHeader(
        session_id=session, start_token=0, num_tokens=len(tokens), token_ids=tokens,
        format=KV, bytes_per_token=BPT, model="m", dtype=common_pb2.KV_DTYPE_FLOAT32, **kw))


def _slow_write(stub, session: str, tokens: list[int], first_sent: threading.Event,
                out: dict) -> None:
    """A streamed WriteKV whose chunks leave CHUNK_GAP_S apart (allow_async: the reply may
    come before the SSD copy, which must still land before the store exits)."""
    data = token_bytes(session, tokens)
    size = -(-len(data) // SLOW_CHUNKS)

    def chunks():
        yield _header(session, tokens, allow_async=True)
        for offset in range(0, len(data), size):
            yield kv_store_pb2.KVChunk(data=data[offset:offset + size], offset=offset)
            first_sent.set()
            time.sleep(CHUNK_GAP_S)
    try:
        out["reply"] = stub.WriteKV(chunks(), timeout=60)
    except grpc.RpcError as exc:
        out["error"] = f"{exc.code().name}: {exc.details()}"
    finally:
        first_sent.set()


def _health(target: str) -> int | None:
    with channel(target) as ch:
        try:
            return health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(
                service="bidaw.v1.KVStore"), timeout=2).status
        except grpc.RpcError:
            return None  # nothing answers


def _refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value


def _sigterm(store: ServiceProcess) -> float:
    """SIGTERM, then until its health no longer says SERVING; when the signal went."""
    began = time.monotonic()
    os.kill(store.proc.pid, signal.SIGTERM)
    while _health(store.target) == HEALTH.SERVING and time.monotonic() < began + 10:
        time.sleep(0.05)
    assert _health(store.target) == HEALTH.NOT_SERVING  # answered, and says it is leaving
    return began


def _restarted_store_holds(tmp_path, sessions: dict[str, list[int]], absent: str) -> None:
    again = _store(tmp_path)  # its index rebuilt from the SSD files
    ch = channel(again.target)
    stub = kv_store_pb2_grpc.KVStoreStub(ch)
    try:
        for session, tokens in sessions.items():
            assert list(stub.Lookup(kv_store_pb2.LookupRequest(session_id=session),
                                    timeout=10).token_ids) == tokens
            chunks = list(stub.ReadKV(kv_store_pb2.ReadKVRequest(session_id=session),
                                      timeout=30))
            assert b"".join(c.data for c in chunks[1:]) == token_bytes(session, tokens)
        assert stub.Lookup(kv_store_pb2.LookupRequest(session_id=absent),
                           timeout=10).tier == common_pb2.TIER_NONE  # refused, never stored
    finally:
        ch.close()
        again.stop()


def _members(scheduler: ServiceProcess) -> int:
    with channel(scheduler.target) as ch:
        return scheduler_pb2_grpc.SchedulerStub(ch).Stats(
            scheduler_pb2.SchedulerStatsRequest(), timeout=10).stores


def _eventually(check, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.1)
    return check()


def test_a_store_told_to_stop_finishes_the_writes_in_flight_and_refuses_new_calls(tmp_path):
    scheduler = ServiceProcess("scheduler", tmp_path, "--store", "", "--workers", "",
                               "--heartbeat-s", "0.5").wait()
    store = _store(tmp_path, "--drain-seconds", "30", "--scheduler", scheduler.target)
    ch = channel(store.target)
    stub = kv_store_pb2_grpc.KVStoreStub(ch)
    slow, new = list(range(100, 132)), list(range(7, 11))
    try:
        assert _eventually(lambda: _members(scheduler) == 1)
        out: dict = {}
        first_sent = threading.Event()
        writer = threading.Thread(target=_slow_write, args=(stub, "slow", slow, first_sent, out))
        writer.start()
        assert first_sent.wait(30)
        began = _sigterm(store)
        assert _eventually(lambda: _members(scheduler) == 0)  # left first: no new work for it
        assert writer.is_alive()  # ... while the write still streams
        for call in (lambda: stub.WriteKV(iter([_header("new", new), kv_store_pb2.KVChunk(
                         data=token_bytes("new", new))]), timeout=10),
                     lambda: stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
                         session_id="new", start_token=0, num_bytes=BPT), timeout=10),
                     lambda: stub.Lookup(kv_store_pb2.LookupRequest(session_id="slow"),
                                         timeout=10),
                     lambda: list(stub.ReadKV(kv_store_pb2.ReadKVRequest(session_id="slow"),
                                              timeout=10))):
            refused = _refused(call)
            assert (refused.code(), refused.details()) == (grpc.StatusCode.UNAVAILABLE, REFUSED)
        writer.join(60)
        assert "error" not in out, out["error"]  # it was: UNAVAILABLE "Cancelling all calls"
        assert out["reply"].num_tokens == len(slow)
        assert store.proc.wait(30) == 0
        assert time.monotonic() - began >= (SLOW_CHUNKS - 1) * CHUNK_GAP_S - 1  # it waited
        assert "drained in" in store.log()
    finally:
        ch.close()
        store.stop()
        scheduler.stop()
    _restarted_store_holds(tmp_path, {"slow": slow}, absent="new")


def test_a_read_in_flight_is_answered_whole(tmp_path):
    """A worker reading a long history over the stream when the signal comes (it reads slowly:
    gRPC's flow control holds the store's sender) gets all of it."""
    store = _store(tmp_path, "--drain-seconds", "30")
    ch = channel(store.target)
    stub = kv_store_pb2_grpc.KVStoreStub(ch)
    tokens = list(range(1, 8193))  # 32 MiB: more than the flow-control windows hold
    data = token_bytes("long", tokens)
    try:
        stub.WriteKV(iter([_header("long", tokens)] + [
            kv_store_pb2.KVChunk(data=data[o:o + (2 << 20)], offset=o)
            for o in range(0, len(data), 2 << 20)]), timeout=60)
        stream = stub.ReadKV(kv_store_pb2.ReadKVRequest(session_id="long"), timeout=60)
        got = [next(stream), next(stream)]  # the header and the first chunk
        _sigterm(store)
        time.sleep(3.0)  # past the 2-s grace it had
        got += list(stream)
        assert b"".join(c.data for c in got[1:]) == data
        assert store.proc.wait(30) == 0
    finally:
        ch.close()
        store.stop()


def test_a_write_into_regions_prepared_before_the_signal_is_taken(tmp_path):
    """A co-located worker asked for regions, then the signal came while it wrote its KV into
    them: its WriteKV naming them comes during the drain, with no call in flight meanwhile."""
    store = _store(tmp_path, "--drain-seconds", "30")
    ch = channel(store.target)
    stub = kv_store_pb2_grpc.KVStoreStub(ch)
    shm = list(range(300, 340))
    data = token_bytes("shm", shm)
    try:
        shm_dir = stub.ShmInfo(kv_store_pb2.ShmInfoRequest(), timeout=10).dir
        prepared = stub.PrepareShmWrite(kv_store_pb2.PrepareShmWriteRequest(
            session_id="shm", start_token=0, num_bytes=len(data)), timeout=10)
        _sigterm(store)
        time.sleep(1.0)  # the worker is slow to write: nothing else keeps the store up
        pos = 0
        for piece in prepared.pieces:
            fd = os.open(os.path.join(shm_dir, piece.region), os.O_WRONLY)
            try:
                os.pwrite(fd, data[pos:pos + piece.length], piece.offset)
            finally:
                os.close(fd)
            pos += piece.length
        reply = stub.WriteKV(iter([_header("shm", shm, shm_region=prepared.region)]),
                             timeout=10)
        assert reply.num_tokens == len(shm) and reply.durable
        assert store.proc.wait(30) == 0
    finally:
        ch.close()
        store.stop()
    _restarted_store_holds(tmp_path, {"shm": shm}, absent="new")


def test_a_store_with_nothing_in_flight_stops_at_once(tmp_path):
    store = _store(tmp_path, "--drain-seconds", "30")
    began = time.monotonic()
    os.kill(store.proc.pid, signal.SIGTERM)
    assert store.proc.wait(30) == 0
    assert time.monotonic() - began < 10  # not the whole drain bound
    store.stop()


def test_drain_seconds_must_be_finite_and_not_negative():
    from kv_store.config import StoreConfig

    for value in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="--drain-seconds must be"):
            StoreConfig(drain_seconds=value)
