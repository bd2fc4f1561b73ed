"""The compute workers the scheduler dispatches to, with their free slots."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc

from services.runtime.gen import compute_worker_pb2, compute_worker_pb2_grpc
from services.runtime.grpc_util import channel

from scheduler.worker_models import clash

log = logging.getLogger("bidaw.scheduler")


@dataclass
class Worker:
    target: str
    stub: compute_worker_pb2_grpc.ComputeWorkerStub
    max_running: int = 1
    running: int = 0
    healthy: bool = False
    static: bool = False  # from --workers: alive while it answers Info (else: while it beats)
    model: str = ""  # the model it serves: from its Registration, then from its Info
    other_model: bool = False  # its Info named another model than the others': no turns


class WorkerPool:
    def __init__(self, targets: list[str]):
        self._lock = threading.Lock()
        self.workers: list[Worker] = []
        for target in targets:
            self.add(target, static=True)

    def add(self, target: str, model: str = "", static: bool = False) -> bool:
        """A new worker (it takes work once `refresh` has heard from it); False if known."""
        with self._lock:
            if any(w.target == target for w in self.workers):
                return False
            self.workers.append(Worker(target, compute_worker_pb2_grpc.ComputeWorkerStub(
                channel(target)), static=static, model=model))
            return True

    def serving(self, besides: str = "") -> tuple[str, list[str]]:
        """The model the workers serve, the first member's (worker_models.py), and the
        workers serving it, `besides` left out; ("", []) while none has said. A --workers one
        is a member while down too (restarting): its model holds meanwhile."""
        with self._lock:
            alive = [w for w in self.workers if w.model and w.target != besides
                     and not w.other_model]
        if not alive:
            return "", []
        return alive[0].model, [w.target for w in alive if w.model == alive[0].model]

    def remove(self, target: str) -> bool:
        """Stop dispatching to a worker; turns running there finish (or are re-run if it died)."""
        with self._lock:
            kept = [w for w in self.workers if w.target != target]
            removed = len(kept) != len(self.workers)
            self.workers = kept
            return removed

    def refresh(self, timeout: float = 5.0) -> None:
        """Ask every worker for its info; one that does not answer takes no work."""
        with self._lock:
            workers = list(self.workers)
        for w in workers:
            self._refresh(w, timeout)

    def _refresh(self, w: Worker, timeout: float) -> None:
        try:
            info = w.stub.Info(compute_worker_pb2.WorkerInfoRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            if w.healthy:
                log.warning("worker %s unreachable: %s", w.target, exc.code())
            w.healthy = False
            return
        model, serving_at = self.serving(besides=w.target)
        other = bool(info.model and model and info.model != model)
        if other and not w.other_model:
            log.error("%s; it takes no turns", clash(w.target, info.model, model, serving_at))
        elif w.other_model and not other:
            log.info("worker %s of model %r takes turns again", w.target, info.model)
        with self._lock:
            w.max_running, w.healthy, w.other_model = max(1, info.max_running), not other, other
            w.model = info.model or w.model

    def refresh_one(self, target: str, timeout: float = 5.0) -> None:
        with self._lock:
            worker = next((w for w in self.workers if w.target == target), None)
        if worker is not None:
            self._refresh(worker, timeout)

    def acquire(self) -> Worker | None:
        """The least loaded healthy worker with a free slot, its slot taken; None if none."""
        with self._lock:
            free = [w for w in self.workers if w.healthy and w.running < w.max_running]
            if not free:
                return None
            worker = min(free, key=lambda w: w.running / w.max_running)
            worker.running += 1
            return worker

    def by_load(self) -> list[Worker]:
        """The healthy workers (of the served model), least loaded first; no slot taken."""
        with self._lock:
            healthy = [w for w in self.workers if w.healthy]
        return sorted(healthy, key=lambda w: w.running / w.max_running)

    def release(self, worker: Worker, failed: bool = False) -> None:
        with self._lock:
            worker.running -= 1
            if failed:
                worker.healthy = False

    def running(self) -> int:
        with self._lock:
            return sum(w.running for w in self.workers)

    def slots(self) -> tuple[int, int]:
        """(free, total) turn slots over the healthy workers."""
        with self._lock:
            healthy = [w for w in self.workers if w.healthy]
            total = sum(w.max_running for w in healthy)
            return max(total - sum(w.running for w in healthy), 0), total

    def healthy_count(self) -> int:
        return sum(w.healthy for w in self.workers)
