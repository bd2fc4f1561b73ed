"""The dispatcher core: the one place that decides which turn runs next (no gRPC here).

Turns wait as `Pending` entries in the pure queue policy (scheduler/policy: "bidaw" = ready
queue + disk-HRRN preparing queue, or "fcfs"). `step` is one round of decisions under the lock:
settle loads whose end was missed, start the SSD loads the policy picks, and hand ready turns to
the workers with a free slot. A store reporting a load finished (`on_load_finished`) puts its
turn back at its arrival position, ready. The loop thread runs `step`, the store promotions it
asks for (outside the lock) and, every 2 s, the members' upkeep. With a `restore` chooser
(`--restore-choice on`), a load the policy picks may instead be skipped: the turn is ready at
once and its worker recomputes the history, loads only a prefix (`Pending.kv_max_tokens`), or
recomputes the beginning while the store reads the rest (`Pending.kv_suffix_from`).
A load waiting for DRAM room holds no disk slot, and its turn keeps its place (`_release_parked`).
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import services.runtime.tracing as tracing
from services.runtime import metrics
from services.runtime.gen import common_pb2, kv_store_pb2

from scheduler.policy import QueuedRequest, RequestQueue
from scheduler.restore_chooser import LiveRestoreChooser
from scheduler.restore_decisions import RestoreDecisions
from scheduler.store_shards import StoreShards
from scheduler.workers import Worker, WorkerPool

log = logging.getLogger("bidaw.scheduler")
LOAD_TIMEOUT_S = 30.0  # a load not reported finished by then is assumed done (or lost)
MAINTAIN_EVERY_S = 2.0  # member expiry and worker refresh
LOCATION = {common_pb2.TIER_NONE: "none", common_pb2.TIER_DRAM: "dram",
            common_pb2.TIER_SSD: "ssd", common_pb2.TIER_LOADING: "loading"}


@dataclass
class Pending:
    seq: int
    session_id: str
    arrival: float
    dispatched: threading.Event = field(default_factory=threading.Event)
    worker: Worker | None = None
    trace_ctx: object = None  # the turn's trace context, for spans the dispatcher records
    ready_at: float = 0.0  # when its KV was ready (arrival, or the end of its SSD load)
    where: str = "none"  # where its KV was when it arrived
    prompt_tokens: int = 0  # the prompt's size (restore_chooser.prompt_tokens)
    kv_max_tokens: int | None = None  # the restore choice: reuse at most this many (None: all)
    kv_suffix_from: int = 0  # the restore choice: recompute the tokens before it, read the rest
    landed_asked: int = 0  # the landed start of its load it was last asked about


class QueueFull(Exception):
    """The queue already holds `max_queue` turns."""


class Dispatcher(RestoreDecisions):
    def __init__(self, queue: RequestQueue, pool: WorkerPool, scheduler_id: str,
                 max_queue: int, restore: LiveRestoreChooser | None = None):
        self.queue = queue
        self.pool = pool
        self.max_queue = max_queue
        self.restore = restore
        self.stores = StoreShards(scheduler_id, self.on_load_finished, self.queued_sessions)
        self._pending: dict[int, Pending] = {}  # queued, by request id (= seq)
        self._loading: dict[int, tuple[str, float]] = {}  # request id -> (session, start)
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stop = threading.Event()
        metrics.QUEUE_LENGTH.labels("ready").set_function(lambda: self.queue.ready_len)
        metrics.QUEUE_LENGTH.labels("preparing").set_function(
            lambda: self.queue.waiting_len + self.queue.loading_len)
        metrics.RUNNING.set_function(self.pool.running)

    def start(self, maintain: Callable[[], None]) -> None:
        threading.Thread(target=self._run, args=(maintain,), name="dispatch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.wake()

    def wake(self) -> None:
        """Something changed (a worker slot came free, a worker joined): decide again now."""
        with self._cond:
            self._cond.notify_all()

    # -- a turn's side ----------------------------------------------------------------------

    def enqueue(self, session_id: str, arrival: float, parent: str = "",
                announce: bool = True, prompt_tokens: int = 0) -> Pending:
        """Queue a turn where its KV is; a new branch reads its parent's KV. `announce` tells
        the store it is queued (a re-run is the same turn: the store knows it already)."""
        loc = self.stores.location(session_id)
        kv_session = session_id  # whose KV the turn reads
        if loc is None and parent:
            kv_session, loc = parent, self.stores.location(parent)
        where = LOCATION.get(loc.tier, "none") if loc is not None else "none"
        with self._cond:
            if len(self.queue) >= self.max_queue:
                raise QueueFull(f"{len(self.queue)} turns queued; retry later")
            pending = Pending(next(self._seq), session_id, arrival, trace_ctx=tracing.current(),
                              where=where, prompt_tokens=prompt_tokens)
            queued_as = where
            plan = self._plan_at_arrival(loc, prompt_tokens) if where in ("ssd", "loading") \
                else None
            if plan is not None:  # ready now: the worker recomputes (and reads a landed end)
                queued_as = "none"
                pending.kv_max_tokens, pending.kv_suffix_from = plan.max_tokens, plan.suffix_from
            self.queue.add(pending.seq, kv_session, pending.seq, arrival, queued_as,
                           loc.num_bytes if loc is not None else 0)
            self._pending[pending.seq] = pending
            if queued_as == "loading":  # a load someone else started (a client's prepare): its
                self._loading[pending.seq] = (kv_session, arrival)  # end readies this turn
            self._cond.notify_all()
        if announce:
            self.stores.arrival(session_id)
        return pending

    def wait(self, pending: Pending, active: Callable[[], bool]) -> bool:
        """Block until the turn has a worker (True); False, and cancelled, once `active()` is
        false (its client left) or the dispatcher stops first."""
        while not pending.dispatched.wait(0.25):
            if not active() or self._stop.is_set():
                self.cancel(pending)
                return False
        return True

    def cancel(self, pending: Pending) -> None:
        """Take a turn out of the queue; one dispatched meanwhile gives its worker slot back."""
        with self._cond:
            if pending.seq in self._pending:
                del self._pending[pending.seq]
                self.queue.remove(pending.seq)
                self._loading.pop(pending.seq, None)
                return
        pending.dispatched.wait()
        self.pool.release(pending.worker)

    # -- the decisions ----------------------------------------------------------------------

    def step(self, wait_s: float = 0.0) -> list[QueuedRequest]:
        """One round of decisions; returns the SSD loads to start (their RPCs go outside the
        lock). With none to start it first waits up to `wait_s` for a change, inside the same
        lock hold, so no wake-up is lost between deciding and waiting."""
        loads = []
        with self._cond:
            now = time.monotonic()
            self._reconcile_loads(now)
            self._take_landed_ends(now)
            decided = time.perf_counter()
            while (r := self.queue.next_load(now, self._reading())) is not None:
                if self._restore_instead(r, now):
                    continue
                self._loading[r.request_id] = (str(r.session_id), now)
                log.debug("load %s of %r (%d bytes)", r.request_id, r.session_id, r.kv_bytes)
                loads.append(r)
            while self._release_parked() or self.queue.peek_ready() is not None:
                worker = self.pool.acquire()
                if worker is None:
                    break
                pending = self._pending.pop(self.queue.pop_ready().request_id)
                log.debug("dispatch %s of %r to %s", pending.seq, pending.session_id,
                          worker.target)
                metrics.SCHEDULING_DECISION.observe(time.perf_counter() - decided)
                self._left_ready_queue(pending)
                pending.worker = worker
                pending.dispatched.set()
                decided = time.perf_counter()
            if not loads and wait_s > 0:
                self._cond.wait(timeout=wait_s)
        return loads

    def on_load_finished(self, session_id: str, ok: bool = True) -> None:
        """The store says a session's load ended (`ok` or not, the turn may run now)."""
        with self._cond:
            for rid in [r for r, (s, _) in self._loading.items() if s == session_id]:
                self._finish_load(rid)

    # -- inspection -------------------------------------------------------------------------

    def lengths(self) -> dict[str, int]:
        with self._cond:
            return self.queue.lengths()

    def queued_sessions(self) -> list[str]:
        with self._cond:
            return [str(s) for s in self.queue.upcoming(len(self.queue))]

    # -- internals --------------------------------------------------------------------------

    def _run(self, maintain: Callable[[], None]) -> None:
        last_maintained = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_maintained > MAINTAIN_EVERY_S:
                maintain()
                last_maintained = time.monotonic()
            for r in self.step(wait_s=0.1):
                self._start_load(r.request_id, str(r.session_id))

    def _start_load(self, request_id: int, session_id: str) -> None:
        with self._cond:
            pending = self._pending.get(request_id)
        with tracing.span("scheduler.promote", parent=pending and pending.trace_ctx,
                          session=session_id):
            if not self.stores.promote(session_id):  # no LoadFinished will come
                self._finish_load(request_id)

    def _finish_load(self, request_id: int) -> None:
        with self._cond:
            if self._loading.pop(request_id, None) is None:
                return
            log.debug("load %s finished", request_id)
            self.queue.load_finished(request_id)
            pending = self._pending.get(request_id)
            if pending is not None:
                now = pending.ready_at = time.monotonic()
                metrics.QUEUE_WAIT.labels("preparing").observe(now - pending.arrival)
                loc = self.stores.location(pending.session_id)
                tracing.record_span(
                    "scheduler.preparing_queue", pending.arrival, now,
                    parent=pending.trace_ctx, session=pending.session_id,
                    kv_bytes=loc.num_bytes if loc else 0,
                    kv_tokens=loc.num_tokens if loc else 0)
            self._cond.notify_all()

    def _reading(self) -> int:
        """Loads holding the disk, which `max_loads` bounds: not those waiting for DRAM room."""
        return sum(not self._parked(session_id) for session_id, _ in self._loading.values())

    def _parked(self, session_id: str) -> bool:  # its load waits for DRAM room
        return getattr(self.stores.location(session_id), "waiting_for_room", False)

    def _release_parked(self) -> bool:
        """A load waiting for DRAM room (the store's `waiting_for_room`) must not cost its turn
        its place: once a worker slot is free and no ready turn arrived before it, the turn runs
        now, its worker reading the KV from SSD (under the lock; True if one was released)."""
        if not self._loading or self.pool.slots()[0] == 0:
            return False
        head = self.queue.peek_ready()
        for rid in sorted(self._loading):  # request ids are arrival order
            if head is not None and head.arrival_seq < rid:
                return False
            if self._parked(self._loading[rid][0]):
                log.debug("load %s waits for room: its turn runs first", rid)
                self._finish_load(rid)
                return True
        return False

    def _reconcile_loads(self, now: float) -> None:
        """Loads whose end we missed (stream reconnects, store restarts) must not hang turns."""
        for rid, (session_id, started) in list(self._loading.items()):
            tier = self.stores.tier(session_id)
            if now - started > LOAD_TIMEOUT_S or tier in (common_pb2.TIER_DRAM,
                                                          common_pb2.TIER_NONE):
                self._finish_load(rid)

    def _left_ready_queue(self, pending: Pending) -> None:
        now = time.monotonic()
        ready_at = pending.ready_at or pending.arrival
        metrics.QUEUE_WAIT.labels("ready").observe(now - ready_at)
        tracing.record_span("scheduler.ready_queue", ready_at, now, parent=pending.trace_ctx,
                            session=pending.session_id, where=pending.where,
                            queued=len(self.queue))
