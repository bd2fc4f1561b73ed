"""`bidaw bench live`'s driver: for each system, start a fresh embedded deployment, warm it up,
replay the same plan against it, read the store's counters, stop it. I/O only; what is measured
and how it is summarised live in client.py and report.py."""
from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import grpc

from bench.replay.client import Replayer, ReplayResult
from bench.replay.plan import Plan
from bench.replay.records import TurnRecord
from bench.replay.sizing import TierSizes
from bench.replay.systems import System, deployment_kwargs

log = logging.getLogger("bidaw.bench.live")


@dataclass
class LiveOptions:
    model: str = "smollm2-135m"
    dtype: str = "float32"       # the workers' --dtype
    max_loads: int = 2
    max_batch: int = 0           # worker's batch cap (0: the worker's default)
    min_step_ms: float = 0.0     # worker's step floor (0: none)
    deadline_s: float = 0.0      # per system: no turn is sent after this (0: none)
    end_after_s: float | None = None  # users end their sessions this long after (None: never)
    prepare_lead_s: float | None = None  # clients prepare each turn this long before (None: never)
    prepare_share: float = 1.0   # the share of users whose clients prepare
    data_dir: str = ""           # deployments' files (default: a temporary directory)
    start_timeout_s: float = 300.0


@dataclass
class SystemRun:
    name: str
    result: ReplayResult
    store_stats: dict = field(default_factory=dict)
    start_s: float = 0.0         # deployment start-up time (not part of any figure)


def _warm_up(target: str) -> None:
    """One tiny turn, so the first measured turn does not pay the model's first-call costs."""
    from services.client.chat_client import ChatClient

    client = ChatClient(target, timeout=300)
    try:
        client.turn("warm-up", prompt_token_ids=[200, 201, 202, 203], max_tokens=2,
                    ignore_eos=True)
    finally:
        client.close()


def _store_stats(target: str) -> dict:
    from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc
    from services.runtime.grpc_util import channel

    try:
        with channel(target) as ch:
            stats = kv_store_pb2_grpc.KVStoreStub(ch).Stats(kv_store_pb2.StoreStatsRequest(),
                                                           timeout=10)
        return {f.name: getattr(stats, f.name) for f in stats.DESCRIPTOR.fields}
    except grpc.RpcError as exc:
        log.warning("store stats unavailable: %s", exc.code())
        return {}


def run_system(name: str, system: System, plan: Plan, sizes: TierSizes, opts: LiveOptions,
               on_record: Callable[[TurnRecord], None] | None = None) -> SystemRun:
    from services.launch.launcher import LocalDeployment

    with tempfile.TemporaryDirectory(prefix=f"bidaw-live-{name}-",
                                     dir=opts.data_dir or None) as tmp:
        max_answer = max((t.answer_len for u in plan.users for t in u.turns), default=256)
        dep = LocalDeployment(data_dir=str(Path(tmp)), **deployment_kwargs(
            system, sizes, model=opts.model, dtype=opts.dtype, max_loads=opts.max_loads, max_answer=max_answer,
            max_batch=opts.max_batch, min_step_ms=opts.min_step_ms,
            time_scale=plan.config.time_scale))
        t = time.monotonic()
        with dep.start(timeout=opts.start_timeout_s):
            _warm_up(dep.scheduler_target)
            started = time.monotonic() - t
            result = Replayer(dep.scheduler_target, plan, store_target=dep.store_target,
                              deadline_s=opts.deadline_s, end_after_s=opts.end_after_s,
                              prepare_lead_s=opts.prepare_lead_s,
                              prepare_share=opts.prepare_share, on_record=on_record).run()
            stats = _store_stats(dep.store_target) if system.use_store else {}
        return SystemRun(name, result, stats, started)
