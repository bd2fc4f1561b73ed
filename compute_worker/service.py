"""The ComputeWorker gRPC service: a thin shell over the engine actor on Ray."""
from __future__ import annotations

import logging
import math
import threading
import uuid

import grpc
import ray

import services.runtime.tracing as tracing
from services.runtime import metrics
from services.runtime.gen import common_pb2, compute_worker_pb2, compute_worker_pb2_grpc
from services.runtime.rpc_errors import BadRequest
from services.runtime.limits import MAX_SESSION_ID_BYTES, UINT32_MAX
from services.runtime.tokenize_bounds import tokenize_problem
from services.runtime.turn_bounds import turn_bounds_problem

from compute_worker.prompt import TurnError
from compute_worker.prompt_bound import check_turn_size

log = logging.getLogger("bidaw.compute_worker")
FINITE_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def check_request(request: compute_worker_pb2.WorkerTurnRequest) -> None:
    """What the scheduler validated already, again: the worker can be called directly."""
    turn = request.turn
    if not turn.session_id:
        raise BadRequest("turn.session_id is empty")
    if len(turn.session_id.encode()) > MAX_SESSION_ID_BYTES:
        raise BadRequest(f"turn.session_id is longer than {MAX_SESSION_ID_BYTES} bytes")
    for name in ("queue_s", "since_arrival_s"):
        if not 0.0 <= getattr(request, name) < math.inf:  # NaN fails too
            raise BadRequest(f"{name} must be a finite number >= 0")
    for name in FINITE_FIELDS:
        if not math.isfinite(getattr(turn, name)):
            raise BadRequest(f"turn.{name} must be a finite number")
    if not 0.0 <= turn.temperature <= 2.0:
        raise BadRequest(f"turn.temperature {turn.temperature} is outside [0, 2]")
    if any(not math.isfinite(v) for v in turn.logit_bias.values()):
        raise BadRequest("turn.logit_bias values must be finite numbers")
    bounds = turn_bounds_problem(turn)
    if bounds is not None:
        raise BadRequest(f"turn.{bounds}")
    if turn.prompt_only and (turn.max_tokens or turn.min_tokens):
        raise BadRequest("turn.prompt_only asks for no answer: max_tokens and min_tokens "
                         "must be 0")
    for name in ("kv_prefix_tokens", "kv_suffix_from"):
        if getattr(request, name) > UINT32_MAX:
            raise BadRequest(f"{name} {getattr(request, name)} is above {UINT32_MAX}")


class ComputeWorkerService(compute_worker_pb2_grpc.ComputeWorkerServicer):
    def __init__(self, actor, worker_id: str):
        self.actor = actor
        self.worker_id = worker_id
        self.info = ray.get(actor.info.remote())
        self.max_running = self.info["max_batch"]
        self._running = 0
        self._lock = threading.Lock()
        metrics.WORKER_RUNNING.set_function(lambda: self._running)

    def RunTurn(self, request, context):
        check_request(request)
        try:  # before the text crosses to the actor, which would tokenise it
            check_turn_size(request.turn, self.info["max_prompt_bytes"], self.info["max_context"])
        except TurnError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        with self._lock:
            self._running += 1
        key = uuid.uuid4().hex  # the request id is only unique per scheduler
        # The client (scheduler) leaving must stop the engine now: this thread may be waiting
        # for the first token of a long prefill, and ray.cancel cannot stop a threaded actor.
        ended = threading.Event()  # the turn ran to its end: nothing to cancel
        context.add_callback(lambda: ended.is_set() or self.actor.cancel_turn.remote(key))
        stream = self.actor.run_turn.remote(request.SerializeToString(), tracing.inject(), key)
        try:
            for ref in stream:
                kind, payload = ray.get(ref)
                if kind == "error":
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, payload)
                event = common_pb2.TurnEvent.FromString(payload)
                if event.HasField("summary"):
                    s = event.summary
                    s.worker_id = self.worker_id
                    metrics.PREFILL_TIME.observe(max(0.0, s.ttft_s - s.queue_s - s.kv_load_s))
                    if s.convert_s:
                        metrics.CONVERSION_TIME.observe(s.convert_s)
                    if s.respelt_tokens:
                        metrics.RESPELT.labels("turns").inc()
                        metrics.RESPELT.labels("tokens").inc(s.respelt_tokens)
                yield event
            ended.set()
        except ray.exceptions.RayActorError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"engine actor died: {exc}")
        finally:
            if not context.is_active():  # the client went away: stop generating
                try:
                    ray.cancel(stream)
                except Exception:  # already finished
                    pass
            with self._lock:
                self._running -= 1

    def Tokenize(self, request, context):
        problem = tokenize_problem(request)
        if problem:
            raise BadRequest(problem)
        try:  # the actor's own tokenizer: the one its turns use
            kind, payload = ray.get(self.actor.tokenize.remote(request.SerializeToString()),
                                    timeout=context.time_remaining())
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"engine actor: {type(exc).__name__}")
        if kind == "error":
            raise BadRequest(payload)
        return common_pb2.TokenizeReply.FromString(payload)

    def Info(self, request, context):
        with self._lock:
            running = self._running
        return compute_worker_pb2.WorkerInfo(
            worker_id=self.worker_id, model=self.info["model"],
            kv_format=self.info["kv_format"], kv_bytes_per_token=self.info["kv_bytes_per_token"],
            max_context=self.info["max_context"], running=running, max_running=self.max_running,
            device=self.info["device"], kv_dtype=self.info["kv_dtype"])
