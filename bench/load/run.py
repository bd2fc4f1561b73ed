"""One load run: (a deployment,) the sampler, the sessions, the report."""
from __future__ import annotations

import tempfile
import time

from bench.load import deploy
from bench.load.driver import Driver, LoadPlan
from bench.load.records import Attempt
from bench.load.sampler import Sampler
from bench.load.verdict import report


def run_against(plan: LoadPlan, *, pids: dict[str, int], scheduler: str,
                queue_bound: int | None, warmup_s: float,
                interval_s: float = 5.0) -> tuple[dict, list[Attempt], list]:
    """Drive `plan` against a running gateway while sampling; (report, attempts, samples)."""
    sampler = Sampler(pids, scheduler, interval_s).start()
    start = time.monotonic()
    try:
        attempts = Driver(plan).run()
    finally:
        samples = sampler.stop()
    out = report(attempts, samples, sessions=plan.sessions, duration_s=plan.duration_s,
                 warmup_s=warmup_s, max_tokens=plan.max_tokens, queue_bound=queue_bound,
                 wall_s=time.monotonic() - start)
    return out, attempts, samples


def run_own(plan_args: dict, limits: deploy.LoadLimits, *, warmup_s: float,
            interval_s: float = 5.0, data_dir: str = "") -> tuple[dict, list[Attempt], list]:
    """Start a deployment sized by `limits`, run the load against it, stop it."""
    with tempfile.TemporaryDirectory(prefix="bidaw-load-") as tmp:
        dep = deploy.start(data_dir or tmp, limits, plan_args["max_tokens"])
        try:
            plan = LoadPlan(url=dep.gateway_url, **plan_args)
            out, attempts, samples = run_against(
                plan, pids=deploy.service_pids(dep), scheduler=dep.scheduler_target,
                queue_bound=limits.max_queue, warmup_s=warmup_s, interval_s=interval_s)
        finally:
            dep.stop()
    out["limits"] = vars(limits)
    return out, attempts, samples
