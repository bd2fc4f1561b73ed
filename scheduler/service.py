"""The Scheduler gRPC service: queues turns, dispatches them to workers, relays their tokens.

Each SubmitTurn call waits in its own handler thread until the dispatcher hands it a worker slot;
the dispatcher thread is the only place that decides order. Turns of one session run one at a
time, so a session's KV is never written by two turns at once.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import grpc

from services.gen import common_pb2, compute_worker_pb2, scheduler_pb2, scheduler_pb2_grpc

from .awareness import AwarenessClient
from .config import SchedulerConfig
from .workers import Worker, WorkerPool

log = logging.getLogger("bidaw.scheduler")
ROLES = ("system", "user", "assistant")
MAX_SESSION_ID = 256
MAX_RETRIES = 2  # a turn whose worker dies before streaming anything is re-run elsewhere


@dataclass
class Pending:
    seq: int
    session_id: str
    arrival: float
    dispatched: threading.Event = field(default_factory=threading.Event)
    worker: Worker | None = None


def validate(turn: common_pb2.TurnRequest, config: SchedulerConfig) -> str | None:
    """The reason a turn is malformed, or None."""
    if not turn.session_id:
        return "session_id is empty"
    if len(turn.session_id.encode()) > MAX_SESSION_ID:
        return f"session_id is longer than {MAX_SESSION_ID} bytes"
    if turn.messages and turn.prompt_token_ids:
        return "give messages or prompt_token_ids, not both"
    if not turn.messages and not turn.prompt_token_ids:
        return "the prompt is empty: no messages and no prompt_token_ids"
    for m in turn.messages:
        if m.role not in ROLES:
            return f"message role {m.role!r} is not one of {', '.join(ROLES)}"
    if not any(m.content for m in turn.messages) and not turn.prompt_token_ids:
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
        self._queue: deque[Pending] = deque()  # FCFS
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._session_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self.finished = 0
        self.failed = 0
        self.awareness = AwarenessClient(config.store, config.scheduler_id,
                                         queued_sessions=self._queued_sessions)
        self._stop = threading.Event()
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="dispatch",
                                            daemon=True)

    def start(self) -> "SchedulerService":
        self.pool.refresh()
        self.awareness.start()
        self._dispatcher.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self.awareness.stop()

    def _queued_sessions(self) -> list[str]:
        with self._cond:
            return [p.session_id for p in self._queue]

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatch_loop(self) -> None:
        last_refresh = 0.0
        while not self._stop.is_set():
            if time.monotonic() - last_refresh > 2.0:
                self.pool.refresh(timeout=2.0)  # picks up workers that came back
                last_refresh = time.monotonic()
            with self._cond:
                while self._queue:
                    worker = self.pool.acquire()
                    if worker is None:
                        break
                    pending = self._queue.popleft()
                    pending.worker = worker
                    pending.dispatched.set()
                self._cond.wait(timeout=0.5)

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- API --------------------------------------------------------------------------------

    def SubmitTurn(self, request, context):
        problem = validate(request, self.config)
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        arrival = time.monotonic()
        with self._session_locks[request.session_id]:
            yield from self._serve(request, context, arrival)

    def _serve(self, request, context, arrival: float):
        for attempt in range(MAX_RETRIES + 1):
            pending = self._enqueue(request.session_id, arrival, context)
            if pending is None:
                return
            worker_request = compute_worker_pb2.WorkerTurnRequest(
                request_id=f"{self.config.scheduler_id}-{pending.seq}", turn=request,
                queue_s=time.monotonic() - arrival, since_arrival_s=time.monotonic() - arrival)
            call = pending.worker.stub.RunTurn(worker_request)
            streamed = lost_worker = False
            try:
                for event in call:
                    streamed = True
                    if event.HasField("summary"):
                        self.finished += 1
                        self.awareness.turn_complete(
                            request.session_id, event.summary.completion_tokens,
                            event.summary.prompt_tokens + event.summary.completion_tokens)
                    yield event
                return
            except grpc.RpcError as exc:
                code = exc.code()
                lost_worker = code == grpc.StatusCode.UNAVAILABLE or (
                    code == grpc.StatusCode.CANCELLED and context.is_active())
                if lost_worker and not streamed and attempt < MAX_RETRIES:
                    log.warning("worker %s lost a turn of %r; re-running", pending.worker.target,
                                request.session_id)
                    continue
                self.failed += 1
                if context.is_active():
                    context.abort(grpc.StatusCode.UNAVAILABLE if lost_worker else code,
                                  exc.details() or str(code))
                return
            finally:
                call.cancel()  # no-op once finished; stops the worker if our client left
                self.pool.release(pending.worker, failed=lost_worker)
                self._wake()

    def _enqueue(self, session_id: str, arrival: float, context) -> Pending | None:
        with self._cond:
            if len(self._queue) >= self.config.max_queue:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"{len(self._queue)} turns queued; retry later")
            pending = Pending(next(self._seq), session_id, arrival)
            self._queue.append(pending)
            self._cond.notify_all()
        self.awareness.arrival(session_id, pending.seq)
        while not pending.dispatched.wait(0.25):
            if not context.is_active() or self._stop.is_set():
                with self._cond:
                    if pending in self._queue:
                        self._queue.remove(pending)
                        return None
                pending.dispatched.wait()  # dispatched in the meantime: give the slot back
                self.pool.release(pending.worker)
                return None
        return pending

    def Stats(self, request, context):
        with self._cond:
            queued = len(self._queue)
        return scheduler_pb2.SchedulerStats(
            ready_queue=queued, preparing_queue=0, running=self.pool.running(),
            turns_finished=self.finished, turns_failed=self.failed,
            workers=self.pool.healthy_count(), sessions_known=len(self.awareness.locations),
            awareness_connected=self.awareness.connected.is_set(), policy=self.config.policy)
