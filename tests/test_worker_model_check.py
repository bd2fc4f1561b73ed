"""One model per scheduler (real gRPC servers, real worker processes): a compute worker of another
model is refused with FAILED_PRECONDITION naming both models, and the members stay as they were;
one of the same model in another KV dtype joins. Before, Registration carried no model: a worker
of another model joined silently and turns of one conversation were answered by both models."""
from __future__ import annotations

import logging
import time

import grpc
import pytest

from scheduler.config import SchedulerConfig
from scheduler.main import start as start_scheduler
from services.runtime.gen import common_pb2, compute_worker_pb2, compute_worker_pb2_grpc
from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.registrar import Registrar
from tests.cluster import ServiceProcess
from tests.store_helpers import eventually

WORKER = scheduler_pb2.MEMBER_KIND_WORKER


@pytest.fixture(scope="module")
def dense_worker(tmp_path_factory):
    """A real worker (SmolLM2, dense weights) that registers with no scheduler by itself."""
    worker = ServiceProcess("worker", tmp_path_factory.mktemp("dense"), "--store", "").wait()
    with channel(worker.target) as ch:
        model = compute_worker_pb2_grpc.ComputeWorkerStub(ch).Info(
            compute_worker_pb2.WorkerInfoRequest(), timeout=30).model
    yield worker, model
    worker.stop()


@pytest.fixture
def scheduler():
    made = []

    def make(**fields):
        server, service = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="",
                                                          **fields))
        made.append((server, service))
        target = f"127.0.0.1:{server.port}"
        return scheduler_pb2_grpc.SchedulerStub(channel(target)), service, target

    yield make
    for server, service in made:
        server.stop(0)
        service.stop()


def register(stub, address: str, model: str = "", kv_dtype: int = 0):
    return stub.Register(scheduler_pb2.Registration(kind=WORKER, address=address, model=model,
                                                    kv_dtype=kv_dtype), timeout=10)


def refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        call()
    return refused.value


def test_a_worker_of_another_model_is_refused_and_one_of_another_dtype_joins(
        dense_worker, scheduler, caplog):
    worker, model = dense_worker
    stub, service, _ = scheduler(workers=[worker.target])  # static: its model from its Info
    stats = lambda: stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=10)  # noqa: E731
    assert eventually(lambda: stats().workers == 1)
    assert stats().model == model and model

    error = refusal(lambda: register(stub, "127.0.0.1:1", "Other-Model-7B",
                                     common_pb2.KV_DTYPE_FLOAT32))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "'Other-Model-7B'" in error.details() and f"'{model}'" in error.details()
    assert worker.target in error.details()
    assert [w.target for w in service.pool.workers] == [worker.target]  # unchanged
    assert stats().workers == 1 and stats().model == model

    # the same model in bfloat16: another dtype is the worker's own business (dtype_reuse.py)
    assert register(stub, "127.0.0.1:2", model, common_pb2.KV_DTYPE_BFLOAT16).workers == 2
    with caplog.at_level(logging.WARNING, logger="bidaw.scheduler"):
        assert register(stub, "127.0.0.1:3").workers == 3  # a worker from before the field
    assert any("127.0.0.1:3 registered without saying its model" in r.getMessage()
               for r in caplog.records)
    assert [w.target for w in service.pool.workers] == [worker.target, "127.0.0.1:2",
                                                        "127.0.0.1:3"]

    for bad, why in ((lambda: register(stub, "127.0.0.1:4", "m" * 257), "at most 256"),
                     (lambda: register(stub, "127.0.0.1:4", "a\nb"), "control characters"),
                     (lambda: register(stub, "127.0.0.1:4", model, 99), "kv_dtype 99")):
        error = refusal(bad)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and why in error.details()
    assert "127.0.0.1:4" not in [w.target for w in service.pool.workers]


def test_a_worker_of_another_model_waits_then_joins_once_the_first_model_has_left(
        dense_worker, scheduler, tmp_path):
    worker, model = dense_worker
    stub, _, target = scheduler(workers=[], heartbeat_s=0.5)
    stats = lambda: stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=10)  # noqa: E731
    # the dense worker registers as its own process would (the same Registrar)
    registrar = Registrar(target, WORKER, worker.target, model=model,
                          kv_dtype=common_pb2.KV_DTYPE_FLOAT32).start()
    try:
        assert eventually(lambda: stats().workers == 1 and stats().model == model)
        other = ServiceProcess("worker", tmp_path, "--store", "", "--weights", "int8",
                               "--scheduler", target).wait()
        try:
            assert eventually(lambda: "the scheduler refused this member: FAILED_PRECONDITION"
                              in other.log(), timeout=30)
            assert f"serves model '{model}:int8'" in other.log() and f"'{model}'" in other.log()
            time.sleep(2)  # four heartbeats: still refused, still one worker
            assert stats().workers == 1 and stats().model == model
            registrar.stop()  # the dense worker leaves (a rolling upgrade)
            # its model first, then (once it answers Info) counted as a healthy worker
            assert eventually(lambda: stats().model == f"{model}:int8"
                              and stats().workers == 1, timeout=15)
            # (its own log line follows the scheduler's answer: read it once written)
            assert eventually(lambda: "accepted this member after refusing it" in other.log(),
                              timeout=10)
        finally:
            other.stop()
    finally:
        registrar.stop()


def test_a_configured_worker_down_keeps_its_model_against_another_registering(
        dense_worker, scheduler, tmp_path):
    # Before: while a --workers worker restarted, a worker of another model registered, took
    # the model, and the configured one was refused when back (turns waited meanwhile).
    _, model = dense_worker
    own = ServiceProcess("worker", tmp_path, "--store", "").wait()
    stub, service, _ = scheduler(workers=[own.target], heartbeat_s=0.5)
    stats = lambda: stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=10)  # noqa: E731
    assert eventually(lambda: stats().workers == 1 and stats().model == model)
    own.stop()  # down (bidaw up would restart it)
    assert eventually(lambda: stats().workers == 0, timeout=15)
    error = refusal(lambda: register(stub, "127.0.0.1:1", "Other-Model-7B"))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and own.target in error.details()
    assert [w.target for w in service.pool.workers] == [own.target]
