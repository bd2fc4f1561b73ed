"""The Scheduler gRPC service: queues turns, dispatches them to workers, relays their tokens.

Each SubmitTurn call waits in its own handler thread until the dispatcher hands it a worker slot.
The dispatcher thread is the only place that decides order, through the pure queue policy
(scheduler/policy: "bidaw" = ready queue + disk-HRRN preparing queue, or "fcfs"): it starts SSD
loads (KVStore.Promote) the policy picks, moves a request to ready when the store reports its
load finished on the Awareness stream, and dispatches ready requests to workers with room.
Turns of one session run one at a time, so a session's KV is never written by two turns at once.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

import grpc

import services.runtime.tracing as tracing
from services.runtime import metrics
from services.runtime.gen import (common_pb2, compute_worker_pb2, kv_store_pb2, scheduler_pb2,
                                  scheduler_pb2_grpc)
from services.runtime.limits import MAX_SESSION_ID_BYTES

from scheduler.config import SchedulerConfig
from scheduler.conversations import ConversationIndex
from scheduler.member_address import address_problem
from scheduler.membership import Membership
from scheduler.policy import make_queue
from scheduler.recognition import Recognition
from scheduler.session_locks import SessionLocks
from scheduler.store_shards import StoreShards
from scheduler.workers import Worker, WorkerPool

log = logging.getLogger("bidaw.scheduler")
ROLES = ("system", "user", "assistant")
RETRY_WINDOW_S = 120.0  # how long after arrival a turn whose worker died is re-run
LOAD_TIMEOUT_S = 30.0  # a load not reported finished by then is assumed done (or lost)
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


def validate(turn: common_pb2.TurnRequest, config: SchedulerConfig) -> str | None:
    """The reason a turn is malformed, or None."""
    if len(turn.session_id.encode()) > MAX_SESSION_ID_BYTES:
        return f"session_id is longer than {MAX_SESSION_ID_BYTES} bytes"
    if turn.messages and turn.prompt_token_ids:
        return "give messages or prompt_token_ids, not both"
    if not turn.messages and not turn.prompt_token_ids and not turn.raw_prompt:
        return "the prompt is empty: no messages, prompt_token_ids or raw_prompt"
    for m in turn.messages:
        if m.role not in ROLES:
            return f"message role {m.role!r} is not one of {', '.join(ROLES)}"
    if turn.messages and not any(m.content for m in turn.messages):
        return "the prompt is empty: every message has empty content"
    if turn.max_tokens > config.max_tokens_limit:
        return f"max_tokens {turn.max_tokens} exceeds the limit {config.max_tokens_limit}"
    if not 0.0 <= turn.temperature <= 2.0:
        return f"temperature {turn.temperature} is outside [0, 2]"
    return None


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, config: SchedulerConfig, pool: WorkerPool):
        self.config = config
        self.pool = pool
        extra = ({"prefetch_window": config.prefetch_window, "ssd_aware": config.ssd_aware}
                 if config.policy == "fcfs" else {})
        self.queue = make_queue(config.policy, max_concurrent_loads=config.max_loads, **extra)
        self._pending: dict[int, Pending] = {}  # queued, by request id (= seq)
        self._loading: dict[int, tuple[str, float]] = {}  # request id -> (session, start)
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._session_locks = SessionLocks()  # entries live only while a turn needs one
        self.finished = 0
        self.failed = 0
        self.rerun = 0
        self.stores = StoreShards(config.scheduler_id, self._on_load_finished,
                                  self._queued_sessions)
        self.membership = Membership(config.heartbeat_s, static=[
            *((scheduler_pb2.MEMBER_KIND_WORKER, w) for w in config.workers),
            *((scheduler_pb2.MEMBER_KIND_STORE, t.strip())
              for t in config.store.split(",") if t.strip())])
        self.recognition = Recognition(  # turns without a session id: found by their history
            ConversationIndex(config.conversation_keys, config.conversation_ttl_s)
            if config.conversation_keys > 0 else None,
            alive=lambda s: not self.stores.all_connected() or self.stores.location(s) is not None)
        self._stop = threading.Event()
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="dispatch",
                                            daemon=True)
        metrics.QUEUE_LENGTH.labels("ready").set_function(lambda: self.queue.ready_len)
        metrics.QUEUE_LENGTH.labels("preparing").set_function(
            lambda: self.queue.waiting_len + self.queue.loading_len)
        metrics.RUNNING.set_function(self.pool.running)

    def start(self) -> "SchedulerService":
        for target in filter(None, self.config.store.split(",")):
            self.stores.add(target.strip())
        self.pool.refresh()
        self._dispatcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.stores.stop()

    def _queued_sessions(self) -> list[str]:
        with self._cond:
            return [str(s) for s in self.queue.upcoming(len(self.queue))]

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        last_refresh = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_refresh > 2.0:
                self._expire_members()
                self.pool.refresh(timeout=2.0)  # picks up workers that came back
                last_refresh = time.monotonic()
            loads = []
            with self._cond:
                now = time.monotonic()
                self._reconcile_loads(now)
                decided = time.perf_counter()
                while (r := self.queue.next_load(now, len(self._loading))) is not None:
                    self._loading[r.request_id] = (str(r.session_id), now)
                    log.debug("load %s of %r (%d bytes)", r.request_id, r.session_id, r.kv_bytes)
                    loads.append(r)
                while self.queue.peek_ready() is not None:
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
                if not loads:
                    self._cond.wait(timeout=0.1)
            for r in loads:  # RPCs outside the lock
                self._start_load(r.request_id, str(r.session_id))

    def _left_ready_queue(self, pending: Pending) -> None:
        now = time.monotonic()
        ready_at = pending.ready_at or pending.arrival
        metrics.QUEUE_WAIT.labels("ready").observe(now - ready_at)
        tracing.record_span("scheduler.ready_queue", ready_at, now, parent=pending.trace_ctx,
                            session=pending.session_id, where=pending.where,
                            queued=len(self.queue))

    def _start_load(self, request_id: int, session_id: str) -> None:
        with self._cond:
            pending = self._pending.get(request_id)
        with tracing.span("scheduler.promote", parent=pending and pending.trace_ctx,
                          session=session_id):
            self._promote(request_id, session_id)

    def _promote(self, request_id: int, session_id: str) -> None:
        stub = self.stores.stub(session_id)
        try:
            if stub is None:
                raise LookupError("no KV store shard")
            reply = stub.Promote(kv_store_pb2.PromoteRequest(session_id=session_id), timeout=5.0)
            if reply.tier in (common_pb2.TIER_SSD, common_pb2.TIER_LOADING):
                return  # LoadFinished will follow on the Awareness stream
        except (grpc.RpcError, LookupError) as exc:  # the worker will read from SSD itself
            log.warning("promotion of %r failed: %s", session_id, exc)
        self._finish_load(request_id)

    def _finish_load(self, request_id: int) -> None:
        with self._cond:
            if self._loading.pop(request_id, None) is not None:
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

    def _on_load_finished(self, session_id: str, ok: bool) -> None:
        with self._cond:
            for rid in [r for r, (s, _) in self._loading.items() if s == session_id]:
                self._finish_load(rid)

    def _reconcile_loads(self, now: float) -> None:
        """Loads whose end we missed (stream reconnects, store restarts) must not hang turns."""
        for rid, (session_id, started) in list(self._loading.items()):
            tier = self.stores.tier(session_id)
            if now - started > LOAD_TIMEOUT_S or tier in (common_pb2.TIER_DRAM,
                                                          common_pb2.TIER_NONE):
                self._finish_load(rid)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- API --------------------------------------------------------------------------------

    def SubmitTurn(self, request, context):
        problem = validate(request, self.config)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        arrival = time.monotonic()
        turn = self.recognition.resolve(request)
        with self._session_locks.hold(turn.session_id):
            yield from turn.relay(self._serve(turn.request, context, arrival))

    def _serve(self, request, context, arrival: float):
        """Run the turn; if its worker dies, re-run it (elsewhere or on the restarted actor) and
        skip the tokens the client already has, checking they are the same ones."""
        sent: list[int] = []  # token ids the client already has
        backoff = 0.5
        if self.pool.healthy_count() == 0:  # waiting would only end at the client's deadline
            context.abort(grpc.StatusCode.UNAVAILABLE, "no compute worker is available; retry")
        for attempt in itertools.count():
            pending = self._enqueue(request.session_id, arrival, context, first=attempt == 0,
                                    parent=request.parent_session_id)
            if pending is None:
                return
            with tracing.span("scheduler.dispatch", worker=pending.worker.target,
                              attempt=attempt, session=request.session_id):
                outcome = yield from self._run_on_worker(request, context, pending, arrival, sent)
            if outcome != "retry":
                return
            self.rerun += 1
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _run_on_worker(self, request, context, pending: Pending, arrival: float,
                       sent: list[int]):
        """Relay one attempt's events (skipping a re-run's tokens already in `sent`);
        returns "done", "failed" or "retry"."""
        worker_request = compute_worker_pb2.WorkerTurnRequest(
            request_id=f"{self.config.scheduler_id}-{pending.seq}", turn=request,
            queue_s=time.monotonic() - arrival, since_arrival_s=time.monotonic() - arrival,
            kv_stores=self.stores.members())
        call = pending.worker.stub.RunTurn(worker_request)
        # A client that leaves cancels the worker's turn at once, not at its next event (a long
        # prefill sends none): gRPC Python does not carry cancellation across hops by itself.
        context.add_callback(call.cancel)
        replayed = 0
        lost_worker = False
        try:
            for event in call:
                if replayed < len(sent) and event.token_ids:
                    if list(event.token_ids) != sent[replayed:replayed + len(event.token_ids)]:
                        self.failed += 1
                        context.abort(grpc.StatusCode.UNAVAILABLE, "the worker was lost "
                                      "mid-turn and the re-run diverged; retry the turn")
                    replayed += len(event.token_ids)
                    continue
                sent.extend(event.token_ids)
                replayed = len(sent)
                if event.HasField("summary"):
                    self._turn_finished(request.session_id, event.summary)
                yield event
            return "done"
        except grpc.RpcError as exc:
            code = exc.code()
            lost_worker = code == grpc.StatusCode.UNAVAILABLE or (
                code == grpc.StatusCode.CANCELLED and context.is_active())
            if lost_worker and time.monotonic() - arrival < RETRY_WINDOW_S \
                    and context.is_active() and (not sent or request.temperature == 0):
                log.warning("worker %s lost a turn of %r after %d tokens; re-running",
                            pending.worker.target, request.session_id, len(sent))
                return "retry"
            self.failed += 1
            metrics.TURNS.labels("error").inc()
            if context.is_active():
                context.abort(grpc.StatusCode.UNAVAILABLE if lost_worker else code,
                              exc.details() or str(code))
            return "failed"
        finally:
            call.cancel()  # no-op once finished; stops the worker if our client left
            self.pool.release(pending.worker, failed=lost_worker)
            self._wake()

    def _turn_finished(self, session_id: str, summary: common_pb2.TurnSummary) -> None:
        self.finished += 1
        metrics.observe_turn(summary)
        metrics.TURNS.labels("ok").inc()
        self.stores.turn_complete(session_id, summary.completion_tokens)

    def _enqueue(self, session_id: str, arrival: float, context, first: bool = True,
                 parent: str = "") -> Pending | None:
        loc = self.stores.location(session_id)
        kv_session = session_id  # whose KV the turn reads: a new branch reads its parent's
        if loc is None and parent:
            kv_session, loc = parent, self.stores.location(parent)
        where = LOCATION.get(loc.tier, "none") if loc is not None else "none"
        with self._cond:
            if len(self.queue) >= self.config.max_queue:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"{len(self.queue)} turns queued; retry later")
            pending = Pending(next(self._seq), session_id, arrival, trace_ctx=tracing.current(),
                              where=where)
            self.queue.add(pending.seq, kv_session, pending.seq, arrival, where,
                           loc.num_bytes if loc is not None else 0)
            self._pending[pending.seq] = pending
            self._cond.notify_all()
        if first:  # a re-run is the same turn: the store already knows it is queued
            self.stores.arrival(session_id)
        while not pending.dispatched.wait(0.25):
            if not context.is_active() or self._stop.is_set():
                with self._cond:
                    if pending.seq in self._pending:
                        del self._pending[pending.seq]
                        self.queue.remove(pending.seq)
                        self._loading.pop(pending.seq, None)
                        return None
                pending.dispatched.wait()  # dispatched in the meantime: give the slot back
                self.pool.release(pending.worker)
                return None
        return pending

    def Stats(self, request, context):
        with self._cond:
            lengths = self.queue.lengths()
        return scheduler_pb2.SchedulerStats(
            ready_queue=lengths["ready"], preparing_queue=lengths["waiting"] + lengths["loading"], running=self.pool.running(),
            turns_finished=self.finished, turns_failed=self.failed,
            workers=self.pool.healthy_count(), sessions_known=self.stores.sessions_known(),
            awareness_connected=self.stores.all_connected(), policy=self.config.policy,
            turns_rerun=self.rerun, stores=len(self.stores.members()))

    # -- membership -------------------------------------------------------------------------

    def Register(self, request, context):
        # The cluster token was checked before this handler (services/runtime/cluster_auth.py).
        if request.kind not in (scheduler_pb2.MEMBER_KIND_WORKER, scheduler_pb2.MEMBER_KIND_STORE):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "kind must be WORKER or STORE")
        problem = address_problem(request.address)  # we will dial it: host:port and no more
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if self.membership.is_static(request.kind, request.address):
            return self._registration_reply()  # configured at start: it needs no heartbeat
        if self.membership.beat(request.kind, request.address, time.monotonic()):
            log.info("%s %s joined", scheduler_pb2.MemberKind.Name(request.kind),
                     request.address)
            if request.kind == scheduler_pb2.MEMBER_KIND_WORKER:
                self.pool.add(request.address)
                self.pool.refresh_one(request.address)
                self._wake()
            else:
                self.stores.add(request.address)
        return self._registration_reply()

    def Deregister(self, request, context):
        if request.kind not in (scheduler_pb2.MEMBER_KIND_WORKER, scheduler_pb2.MEMBER_KIND_STORE):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "kind must be WORKER or STORE")
        problem = address_problem(request.address)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        if self.membership.is_static(request.kind, request.address):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"{request.address} was configured at start (--workers/--store): "
                          "it stays a member until the scheduler's flags change")
        if self.membership.leave(request.kind, request.address):
            self._drop_member(request.kind, request.address)
        return self._registration_reply()

    def _registration_reply(self) -> scheduler_pb2.RegistrationReply:
        return scheduler_pb2.RegistrationReply(heartbeat_s=self.membership.heartbeat_s,
                                               workers=len(self.pool.workers),
                                               stores=len(self.stores.members()))

    def _drop_member(self, kind: int, address: str) -> None:
        log.info("%s %s left", scheduler_pb2.MemberKind.Name(kind), address)
        if kind == scheduler_pb2.MEMBER_KIND_WORKER:
            self.pool.remove(address)
        else:
            self.stores.remove(address)

    def _expire_members(self) -> None:
        for kind, address in self.membership.expired(time.monotonic()):
            self._drop_member(kind, address)
