"""Run faults during live replays and judge them: every answer equal to the in-process recompute
reference (greedy, token for token) and no acknowledged KV lost."""
from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from bench.chaos.conversations import Replay, plan_for
from bench.chaos.probes import ProbeWriter, lost_ssd_kv, stored_tokens, wrong_live_kv
from bench.chaos.faults import (ORDER, NotRun, actor_kill, attacker, disk_full, long_wait,
                                partition, redis_restart, scheduler_kill, service_crash,
                                slow_disk, ssd_corrupt, store_kill, worker_kill)
from bench.chaos.reference import Reference
from bench.chaos.topology import Topology
from services.runtime.gen import common_pb2


FAULTS = {"store-kill": store_kill.Fault, "worker-kill": worker_kill.Fault,
          "actor-kill": actor_kill.Fault, "scheduler-kill": scheduler_kill.Fault,
          "ssd-corrupt": ssd_corrupt.Fault, "disk-full": disk_full.Fault,
          "slow-disk": slow_disk.Fault, "redis-restart": redis_restart.Fault,
          "partition": partition.Fault, "service-crash": service_crash.Fault,
          "attacker": attacker.Fault, "long-wait": long_wait.Fault}


def load(name: str):
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(ORDER)}")
    return FAULTS[name]()


@dataclass
class Context:
    workdir: str
    topo_kwargs: dict = field(default_factory=dict)
    on_topology: list = field(default_factory=list)  # callables (ctx, topo) before start
    fault_errors: list[str] = field(default_factory=list)
    topo: Topology | None = None
    replay: Replay | None = None
    before: dict | None = None

    def sessions(self) -> list[str]:
        with self.replay.log.lock:
            return list(self.replay.log.conversations)


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"[chaos] {msg}", file=sys.stderr, flush=True)


def run_fault(name: str, turns: int, reference: Reference, workdir: str | None = None,
              verbose: bool = False, inject_after: float = 0.35) -> dict:
    fault = load(name)
    own = workdir is None
    ctx = Context(workdir or tempfile.mkdtemp(prefix=f"chaos-{name}-"))
    result = {"name": name, "injected": 0, "turns": 0, "wrong_answers": 0,
              "lost_acknowledged_kv": 0, "errors": 0}
    problems: list[str] = []
    checks: dict = {}
    try:
        try:
            fault.setup(ctx)
        except NotRun as why:
            _say(verbose, f"{name}: not run: {why}")
            result["not_run"] = str(why)
            return {**result, "problems": [], "checks": {}}
        topo = Topology(ctx.workdir, workers=fault.workers, **ctx.topo_kwargs)
        for hook in ctx.on_topology:
            hook(ctx, topo)
        ctx.topo = topo
        _say(verbose, f"{name}: starting store, {fault.workers} worker(s), scheduler")
        with topo:
            prefix = f"{name}-"
            ctx.replay = replay = Replay(topo.scheduler_target, plan_for(turns), prefix).start()
            probes = ProbeWriter(topo.store_target, prefix).start()
            replay.wait_done(max(1, int(replay.turns * inject_after)))
            _say(verbose, f"{name}: {replay.log.done}/{replay.turns} turns done; injecting")
            result["injected"] = fault.inject(ctx)
            if fault.ssd_snapshot and ctx.before is not None:
                after = stored_tokens(topo.store_target, ctx.before)
                lost = lost_ssd_kv(ctx.before, after)
                problems += [f"KV on SSD before the fault is gone: {s}" for s in lost]
                result["lost_acknowledged_kv"] += len(lost)
                checks["ssd_sessions_before_fault"] = sum(1 for t, _ in ctx.before.values()
                                                          if t == common_pb2.TIER_SSD)
            log = replay.join()
            probes.stop()
            _say(verbose, f"{name}: replay done ({len(log.answered)} answered, "
                          f"{log.retries} retries, {len(log.errors)} errors); checking")
            checked = fault.check(ctx)
            problems += checked
            checks.update(getattr(fault, "checks", {}))  # a fault's own measurements
            lost, why = probes.lost(set(probes.sessions) if fault.probe_misses_allowed
                                    else set())
            result["lost_acknowledged_kv"] += lost
            problems += why
            checks.update(probe_writes_acknowledged=probes.writes,
                          probe_writes_refused=probes.refused, client_retries=log.retries,
                          cached_turns=sum(1 for a in log.answered if a.cached_tokens))
            stored = stored_tokens(topo.store_target, log.conversations)
            wrong_kv = wrong_live_kv(stored, log.conversations)
            result["lost_acknowledged_kv"] += len(wrong_kv)
            problems += [f"stored KV is not for the conversation's tokens: {s}" for s in wrong_kv]
        for a in log.answered:  # after the services stopped: the CPU is the reference's
            if a.answer != reference.answer(a.prompt, a.max_tokens):
                result["wrong_answers"] += 1
                problems.append(f"wrong answer in {a.session} (prompt {len(a.prompt)} tokens)")
        result["turns"] = len(log.answered)
        problems += log.errors + ctx.fault_errors
        result["errors"] = len(log.errors) + len(ctx.fault_errors) + len(checked)
        if log.answered and len(log.answered) < replay.turns:
            problems.append(f"{replay.turns - len(log.answered)} scripted turns not answered")
    except Exception as exc:  # noqa: BLE001 - a fault run that breaks is an error, not a crash
        result["errors"] += 1
        problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        fault.teardown(ctx)
        if own:
            shutil.rmtree(ctx.workdir, ignore_errors=True)
    for p in problems:
        _say(verbose, f"{name}: {p}")
    result["problems"] = problems
    result["checks"] = checks
    return result


def run(names: list[str], turns: int, verbose: bool = False) -> list[dict]:
    reference = Reference()
    return [run_fault(n, turns, reference, verbose=verbose) for n in names]
