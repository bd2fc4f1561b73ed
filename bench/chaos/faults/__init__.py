"""One module per fault, each a class `Fault` (listed by name in bench/chaos/runner.py's FAULTS, in
ORDER; the registry lives there because every fault module imports BaseFault from here) with:
- `setup(ctx)`: before the topology starts (flags, side processes such as Redis or a proxy);
- `inject(ctx) -> int`: during the replay: inject the fault and recover from it (restart, heal),
  returning how many faults it injected;
  `setup` raises NotRun when the fault cannot run here (e.g. no redis-server);
- `check(ctx) -> list[str]`: after the replay: fault-specific failures (e.g. no resync);
- `teardown(ctx)`;
and attributes `workers` (compute workers needed), `probe_misses_allowed` (an acknowledged probe
may come back as a miss, e.g. after the disk filled up and the store evicted it; wrong bytes are
never allowed), `ssd_snapshot` (KV on SSD before the fault must be there after it); a fault
may fill a dict `checks` with what it measured (reported with the run's)."""
from __future__ import annotations

ORDER = ["store-kill", "worker-kill", "actor-kill", "scheduler-kill", "ssd-corrupt",
         "disk-full", "slow-disk", "redis-restart", "partition", "service-crash",
         "attacker", "long-wait"]


class NotRun(Exception):
    """Raised by `setup` when this machine cannot run the fault (the reason is reported)."""


class BaseFault:
    workers = 1
    probe_misses_allowed = False
    ssd_snapshot = False

    def setup(self, ctx) -> None:
        pass

    def inject(self, ctx) -> int:
        raise NotImplementedError

    def check(self, ctx) -> list[str]:
        return []

    def teardown(self, ctx) -> None:
        pass
