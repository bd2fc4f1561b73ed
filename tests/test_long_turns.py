"""Long turns live, abandoned turns stop (issue 16 §2), over real processes: servers accept the
clients' keepalive pings (no GOAWAY too_many_pings), and a client that gives up mid-prefill
frees the worker at once."""
from __future__ import annotations

import threading
import time

import grpc
import pytest

from services.runtime.gen import common_pb2, compute_worker_pb2, compute_worker_pb2_grpc
from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import KEEPALIVE_ENV, channel
from tests.cluster import ServiceProcess

PING_S = "1"  # 1-s pings: the old servers sent GOAWAY after about 3 of them


@pytest.fixture
def cluster(tmp_path):
    procs: list[ServiceProcess] = []

    def spawn(kind, *flags, env=None):
        procs.append(ServiceProcess(kind, tmp_path, *flags, env=env))
        return procs[-1]

    yield spawn
    for p in reversed(procs):
        p.stop()


def test_idle_awareness_stream_survives_1s_keepalive_pings(cluster, tmp_path, monkeypatch):
    monkeypatch.setenv(KEEPALIVE_ENV, PING_S)  # this process's channels ping each second too
    env = {KEEPALIVE_ENV: PING_S}
    store = cluster("store", "--data-dir", str(tmp_path / "kv"), "--dram-bytes", "8MiB",
                    "--ssd-bytes", "64MiB", env=env).wait()
    scheduler = cluster("scheduler", "--store", store.target, "--workers", "", env=env).wait()
    stub = scheduler_pb2_grpc.SchedulerStub(channel(scheduler.target))

    def connected() -> bool:
        return stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=5).awareness_connected

    deadline = time.monotonic() + 30
    while not connected():
        assert time.monotonic() < deadline, "the Awareness stream never came up"
        time.sleep(0.2)
    drops = 0
    end = time.monotonic() + 12  # 12 pings per connection; the old servers cut after ~3
    while time.monotonic() < end:
        drops += not connected()
        time.sleep(0.2)
    assert drops == 0
    for proc in (store, scheduler):
        log = proc.log()
        assert "too_many_pings" not in log and "GOAWAY" not in log, log[-2000:]


def test_a_client_that_leaves_mid_prefill_frees_the_worker(cluster, tmp_path):
    # Each engine step takes at least 1 s, so the 8,000-token prompt's 16 prefill chunks of
    # 512 take 16 s or more: the cancellation must land between chunks, well before that.
    worker = cluster("worker", "--store", "", "--min-step-ms", "1000", "--threads", "1",
                     "--ray-num-cpus", "1", "--default-max-tokens", "4").wait(240)
    scheduler = cluster("scheduler", "--store", "", "--workers", worker.target).wait()
    info = compute_worker_pb2_grpc.ComputeWorkerStub(channel(worker.target))

    def running() -> int:
        return info.Info(compute_worker_pb2.WorkerInfoRequest(), timeout=10).running

    turn = common_pb2.TurnRequest(session_id="long-prefill", max_tokens=4,
                                  prompt_token_ids=[100 + i % 5000 for i in range(8000)])
    call = scheduler_pb2_grpc.SchedulerStub(channel(scheduler.target)).SubmitTurn(turn,
                                                                                  timeout=600)
    outcome = {}
    reader = threading.Thread(target=lambda: outcome.setdefault("events", _drain(call)))
    reader.start()
    deadline = time.monotonic() + 60
    while running() == 0:
        assert time.monotonic() < deadline, "the turn never reached the worker"
        time.sleep(0.1)
    time.sleep(2.0)  # a few prefill chunks in
    cancelled = time.monotonic()
    call.cancel()
    while running() != 0:
        assert time.monotonic() - cancelled < 5.0, "the worker kept running the cancelled turn"
        time.sleep(0.1)
    reader.join(10)
    assert outcome["events"] == "CANCELLED"  # the client saw no token: it was mid-prefill
    # the worker is free: a short turn is answered at once
    short = common_pb2.TurnRequest(session_id="after", max_tokens=2, prompt_token_ids=[1, 2, 3])
    events = list(scheduler_pb2_grpc.SchedulerStub(channel(scheduler.target)).SubmitTurn(
        short, timeout=120))
    assert any(e.token_ids for e in events)


def _drain(call) -> str:
    try:
        for event in call:
            if event.token_ids:
                return "TOKENS"
    except grpc.RpcError as exc:
        return exc.code().name
    return "OK"
