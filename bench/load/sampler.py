"""Samples, every few seconds on its own thread: the RSS of each service's process tree (from
/proc; the worker's tree holds its Ray processes and the model actor) and the scheduler's queue
lengths (Scheduler.Stats over gRPC)."""
from __future__ import annotations

import pathlib
import threading
import time
from dataclasses import dataclass, field

from bench.chaos.procs import descendants


@dataclass
class Sample:
    t: float                                          # seconds since the sampler started
    rss_mb: dict[str, float] = field(default_factory=dict)  # service -> RSS of its tree
    # service -> "comm pid" -> RSS MB of each process of its tree (what grew, when one did)
    procs: dict[str, dict[str, float]] = field(default_factory=dict)
    ready: int | None = None                          # None: Stats did not answer in time
    preparing: int | None = None
    running: int | None = None

    @property
    def queued(self) -> int | None:
        return None if self.ready is None else self.ready + self.preparing


def rss_kb(pid: int) -> int:
    """VmRSS of one process; 0 if it is gone (or a kernel thread)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def comm(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def tree_rss_mb(root: int) -> dict[str, float]:
    """RSS in MB of `root` and every descendant, by "comm pid"."""
    return {f"{comm(p)} {p}": round(rss_kb(p) / 1024, 1) for p in (root, *descendants(root))}


class Sampler:
    def __init__(self, pids: dict[str, int], scheduler: str = "", interval_s: float = 5.0):
        self.pids = pids
        self.scheduler = scheduler
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def start(self) -> "Sampler":
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(30)
        return self.samples

    def _run(self) -> None:
        stats = self._stats_stub()
        while True:
            self.samples.append(self.sample(stats))
            if self._stop.wait(self.interval_s):
                self.samples.append(self.sample(stats))  # the state at the very end
                return

    def _stats_stub(self):
        if not self.scheduler:
            return None
        from services.runtime.gen import scheduler_pb2_grpc
        from services.runtime.grpc_util import channel

        return scheduler_pb2_grpc.SchedulerStub(channel(self.scheduler))

    def sample(self, stats=None) -> Sample:
        s = Sample(time.monotonic() - self._t0)
        for name, pid in self.pids.items():
            s.procs[name] = tree_rss_mb(pid)
            s.rss_mb[name] = round(sum(s.procs[name].values()), 1)
        if stats is not None:
            import grpc

            from services.runtime.gen import scheduler_pb2

            try:
                reply = stats.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=5.0)
                s.ready, s.preparing, s.running = (reply.ready_queue, reply.preparing_queue,
                                                   reply.running)
            except grpc.RpcError:
                pass  # counted as a missed sample
        return s
