"""The fast fuzzer in tiny mode against the real deployment: every class of malformed HTTP
request gets a clear 4xx (never a 5xx, never no answer), and boundary-valued messages to every
gRPC method of every service get a status other than UNKNOWN/INTERNAL/DEADLINE_EXCEEDED."""
from __future__ import annotations

import random

from bench.chaos.fuzz_fast import fuzz_http_fast, summary
from bench.chaos.fuzz_grpc_fast import fuzz_grpc_fast
from bench.chaos.fuzz_inputs import CLASSES, generate
from scheduler.config import SchedulerConfig
from scheduler.main import start as start_scheduler


def test_inputs_are_reproducible_and_of_every_class():
    for cls in CLASSES:
        a = [generate(cls, random.Random(7)) for _ in range(3)]
        assert a == [generate(cls, random.Random(7)) for _ in range(3)]
        assert all(r.startswith(b"POST /v1/") for r in a)


def test_fast_fuzz_tiny(deployment):
    http = fuzz_http_fast(deployment.host, deployment.gateway_port, per_class=40, seed=3)
    own, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="", workers=[]))
    try:
        grpc_ = fuzz_grpc_fast({"store": deployment.store_target,
                                "worker": deployment.worker_target,
                                "scheduler": deployment.scheduler_target},
                               f"127.0.0.1:{own.port}", per_method=8, turn_methods=3, seed=3)
    finally:
        own.stop(0)
    out = summary(http, grpc_, 1.0)
    assert set(out["http"]) == set(CLASSES)
    assert all(t["inputs"] == 40 for t in out["http"].values())
    assert out["http_5xx_or_no_answer"] == 0, {k: v["first_crashes"]
                                               for k, v in out["http"].items()}
    assert out["http_unclear_errors"] == 0
    for cls in ("surrogates", "depth", "header_bytes", "junk"):
        assert set(out["http"][cls]["statuses"]) <= {"400", "401", "404", "413", "429"}, cls
    methods = set(out["grpc"])
    assert {"KVStore.WriteKV", "KVStore.Awareness", "ComputeWorker.RunTurn",
            "Scheduler.SubmitTurn", "Scheduler.Register", "Scheduler.PrepareSession",
            "Health.Check"} <= methods
    assert out["grpc_unknown_internal_or_hang"] == 0, {k: v["first_crashes"]
                                                      for k, v in out["grpc"].items()
                                                      if v["crashes"]}
    assert all(p.poll() is None for _, p in deployment.procs)
