"""Workers and KV store shards joining and leaving at run time: Register and Deregister
(validated once, here), heartbeat expiry and the worker pool's refresh. Who beat when is the
pure timetable of membership.py; members configured at start (--workers, --store) need no
heartbeat and cannot leave. A worker of another model than the others is refused
(worker_models.py)."""
from __future__ import annotations

import logging
import time
from typing import Callable

import grpc

from services.runtime.gen import scheduler_pb2
from services.runtime.log_repeats import Reminder, since

from scheduler.config import SchedulerConfig
from scheduler.membership import Membership
from scheduler.store_shards import StoreShards
from scheduler.validation import member_problem
from scheduler.worker_models import clash, dtype_name, model_problem
from scheduler.workers import WorkerPool

log = logging.getLogger("bidaw.scheduler")
WORKER, STORE = scheduler_pb2.MEMBER_KIND_WORKER, scheduler_pb2.MEMBER_KIND_STORE


class Refused(Exception):
    """A Register/Deregister the scheduler turns down, with the status to answer it with."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(details)
        self.code, self.details = code, details


class Members:
    def __init__(self, config: SchedulerConfig, pool: WorkerPool, stores: StoreShards,
                 on_worker_joined: Callable[[], None]):
        self.pool = pool
        self.stores = stores
        self.on_worker_joined = on_worker_joined
        self.static_stores = [t.strip() for t in config.store.split(",") if t.strip()]
        self.timetable = Membership(config.heartbeat_s, static=[
            *((WORKER, w) for w in config.workers), *((STORE, t) for t in self.static_stores)])
        self._unnamed: set[str] = set()  # workers that registered without their model (warned)
        self._refused: dict[tuple[str, str], Reminder] = {}  # (worker, model): its reminder

    def start(self) -> None:
        """Join the configured store shards and ask every configured worker for its info."""
        for target in self.static_stores:
            self.stores.add(target)
        self.pool.refresh()

    def register(self, kind: int, address: str, model: str = "",
                 kv_dtype: int = 0) -> scheduler_pb2.RegistrationReply:
        """A heartbeat; the first one of a member makes it join."""
        self._check(kind, address)
        if kind == WORKER:
            self._check_model(address, model, kv_dtype)
        if self.timetable.is_static(kind, address):
            return self.reply()  # configured at start: it needs no heartbeat
        if self.timetable.beat(kind, address, time.monotonic()):
            said = f" (model {model!r}, KV {dtype_name(kv_dtype)})" if model else ""
            log.info("%s %s joined%s", scheduler_pb2.MemberKind.Name(kind), address, said)
            if kind == WORKER:
                self.pool.add(address, model)
                self.pool.refresh_one(address)
                self.on_worker_joined()
            else:
                self.stores.add(address)
        return self.reply()

    def _check_model(self, address: str, model: str, kv_dtype: int) -> None:
        """Refuse a worker whose model is not the one the others serve (worker_models.py); one
        that was a member under another model leaves (it restarted with another model)."""
        problem = model_problem(model, kv_dtype)
        if problem:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if not model:
            if address not in self._unnamed and len(self._unnamed) < 4096:
                self._unnamed.add(address)
                log.warning("worker %s registered without saying its model (a worker from "
                            "before Registration.model): accepted; its Info is checked", address)
            return
        serving, serving_at = self.pool.serving(besides=address)
        if serving and model != serving:
            if self.timetable.leave(WORKER, address):
                self._drop(WORKER, address)
            details = clash(address, model, serving, serving_at)
            if len(self._refused) > 1024:  # a bound; kinds are few
                self._refused.clear()
            held = self._refused.setdefault((address, model), Reminder()).due()
            if held is not None:  # it tries again at every beat: once, then every 5 minutes
                log.warning("refused: %s%s", details, since(held))
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION, details)

    def deregister(self, kind: int, address: str) -> scheduler_pb2.RegistrationReply:
        self._check(kind, address)
        if self.timetable.is_static(kind, address):
            raise Refused(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{address} was configured at start (--workers/--store): "
                          "it stays a member until the scheduler's flags change")
        if self.timetable.leave(kind, address):
            self._drop(kind, address)
        return self.reply()

    def maintain(self) -> None:
        """Drop members whose heartbeats stopped; ask every worker for its info (one that came
        back takes work again)."""
        for kind, address in self.timetable.expired(time.monotonic()):
            self._drop(kind, address)
        self.pool.refresh(timeout=2.0)

    def reply(self) -> scheduler_pb2.RegistrationReply:
        return scheduler_pb2.RegistrationReply(heartbeat_s=self.timetable.heartbeat_s,
                                               workers=len(self.pool.workers),
                                               stores=len(self.stores.members()))

    @staticmethod
    def _check(kind: int, address: str) -> None:
        problem = member_problem(kind, address)
        if problem:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, problem)

    def _drop(self, kind: int, address: str) -> None:
        log.info("%s %s left", scheduler_pb2.MemberKind.Name(kind), address)
        if kind == WORKER:
            self.pool.remove(address)
        else:
            self.stores.remove(address)
