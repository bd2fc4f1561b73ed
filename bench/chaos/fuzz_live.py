"""`bidaw chaos --fuzz-examples`: every property-based fuzzer against a fresh deployment."""
from __future__ import annotations

import sys
import tempfile

from bench.chaos.fuzz import fuzz_scheduler, fuzz_store, fuzz_worker
from bench.chaos.fuzz_http import fuzz_http
from bench.chaos.fuzz_judge import Tally


def fuzz_live(examples: int = 100, verbose: bool = False) -> tuple[int, int]:
    """Fuzz a fresh embedded deployment (store, worker, scheduler, gateway) and, for Register,
    a scheduler of its own; (inputs, crashes), what crashed printed when `verbose`."""
    from scheduler.config import SchedulerConfig
    from scheduler.main import start as start_scheduler
    from services.launch.launcher import LocalDeployment

    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="chaos-fuzz-") as d:
        # Unsupervised: a crash must show as a dead process, not be healed behind our back.
        with LocalDeployment(data_dir=d, dram_bytes="4MiB", default_max_tokens=2,
                             supervise=False) as dep:
            for name, run in (
                    ("store", lambda: fuzz_store(dep.store_target, examples)),
                    ("scheduler", lambda: fuzz_scheduler(dep.scheduler_target, examples,
                                                         register=False)),
                    ("worker", lambda: fuzz_worker(dep.worker_target, dep.store_target,
                                                   max(10, examples // 4))),
                    ("http", lambda: fuzz_http(dep.host, dep.gateway_port, examples))):
                t = run()
                if verbose:
                    print(f"[chaos] fuzz {name}: {t.inputs} inputs, {len(t.crashes)} crashes",
                          file=sys.stderr, flush=True)
                tally.add(t)
            alive = {n: p.poll() is None for n, p in dep.procs}
            tally.crashes += [f"{n} process died during fuzzing" for n, a in alive.items()
                              if not a]
        server, _ = start_scheduler(SchedulerConfig(listen="127.0.0.1:0", store="",
                                                    workers=[]))
        try:
            tally.add(fuzz_scheduler(f"127.0.0.1:{server.port}", examples, submit=False))
        finally:
            server.stop(0)
    for c in tally.crashes:
        if verbose:
            print(f"[chaos] fuzz crash: {c}", file=sys.stderr, flush=True)
    return tally.inputs, len(tally.crashes)
