"""A server's bound on concurrent calls: beyond it a call is refused at once with
RESOURCE_EXHAUSTED (the gateway turns that into 429) instead of waiting, unseen, for a thread."""
from __future__ import annotations

import threading
import time

import grpc

from scheduler.config import SchedulerConfig
from scheduler.main import start as start_scheduler
from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import Server, channel
from tests.fake_scheduler import FakeScheduler


def _turn(text: str) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id="s", max_tokens=4, messages=[
        common_pb2.ChatMessage(role="user", content=text)])


def test_calls_beyond_the_bound_are_refused_at_once():
    fake = FakeScheduler()
    server = Server("127.0.0.1:0", [(scheduler_pb2_grpc.add_SchedulerServicer_to_server, fake)],
                    name="bidaw.v1.Scheduler", max_workers=2, max_concurrent_rpcs=2)
    ch = channel(f"127.0.0.1:{server.port}")
    stub = scheduler_pb2_grpc.SchedulerStub(ch)
    held = [threading.Thread(target=lambda: list(stub.SubmitTurn(_turn("!block"), timeout=20)))
            for _ in range(2)]
    try:
        for t in held:
            t.start()
        deadline = time.monotonic() + 10
        while fake.blocked < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake.blocked == 2
        started = time.monotonic()
        try:
            list(stub.SubmitTurn(_turn("hello"), timeout=10))
            raise AssertionError("a third call was accepted past the bound")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - started < 2.0  # refused, not queued until the timeout
        fake.release.set()
        for t in held:
            t.join(10)
        assert [e.text for e in stub.SubmitTurn(_turn("hello"), timeout=10)][:1] == ["echo:"]
    finally:
        fake.release.set()
        ch.close()
        server.stop(0)


def test_the_scheduler_sizes_its_threads_past_its_queue_bound():
    server, service = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", workers=[],
                                                      store="", max_queue=8))
    try:
        assert server.max_concurrent_rpcs == 8 + 512 + 32
        with channel(f"127.0.0.1:{server.port}") as ch:
            stats = scheduler_pb2_grpc.SchedulerStub(ch).Stats(
                scheduler_pb2.SchedulerStatsRequest(), timeout=5)
        assert stats.policy == "bidaw"
    finally:
        server.stop(0)
        service.stop()
