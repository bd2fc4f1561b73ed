"""One turn from queue to client: wait for a worker, stream the turn to it, relay its events.

A worker lost mid-turn (UNAVAILABLE, or a cancellation our client did not ask for) has the turn
re-run, elsewhere or on the restarted actor, within RETRY_WINDOW_S of its arrival, when that can
give the same answer (nothing sent yet, or greedy sampling): the tokens the client already has
are skipped, and checked to be the same ones. The summary is relayed, counted and reported to
the session's store.
"""
from __future__ import annotations

import itertools
import logging
import time

import grpc

import services.runtime.tracing as tracing
from services.runtime import metrics
from services.runtime.gen import common_pb2, compute_worker_pb2

from scheduler.dispatcher import Dispatcher, Pending, QueueFull
from scheduler.restore_chooser import prompt_tokens

log = logging.getLogger("bidaw.scheduler")
RETRY_WINDOW_S = 120.0  # how long after arrival a turn whose worker died is re-run


class Relay:
    def __init__(self, scheduler_id: str, dispatcher: Dispatcher):
        self.scheduler_id = scheduler_id
        self.dispatcher = dispatcher
        self.finished = 0
        self.failed = 0
        self.rerun = 0

    def serve(self, request: common_pb2.TurnRequest, context, arrival: float):
        """The turn's events, re-running it while its worker is lost and a re-run may."""
        sent: list[int] = []  # token ids the client already has
        backoff = 0.5
        if self.dispatcher.pool.healthy_count() == 0:  # waiting would end at the deadline only
            context.abort(grpc.StatusCode.UNAVAILABLE, "no compute worker is available; retry")
        for attempt in itertools.count():
            pending = self._admit(request, context, arrival, first=attempt == 0)
            if pending is None:
                return
            with tracing.span("scheduler.dispatch", worker=pending.worker.target,
                              attempt=attempt, session=request.session_id):
                outcome = yield from self._attempt(request, context, pending, arrival, sent)
            if outcome != "retry":
                return
            self.rerun += 1
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _admit(self, request, context, arrival: float, first: bool) -> Pending | None:
        """Queue the turn and wait for its worker; None if the client left first."""
        try:
            pending = self.dispatcher.enqueue(request.session_id, arrival,
                                              parent=request.parent_session_id, announce=first,
                                              prompt_tokens=prompt_tokens(request))
        except QueueFull as full:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(full))
        return pending if self.dispatcher.wait(pending, context.is_active) else None

    def _attempt(self, request, context, pending: Pending, arrival: float, sent: list[int]):
        """Relay one attempt's events (skipping a re-run's tokens already in `sent`);
        returns "done", "failed" or "retry"."""
        worker_request = compute_worker_pb2.WorkerTurnRequest(
            request_id=f"{self.scheduler_id}-{pending.seq}", turn=request,
            queue_s=time.monotonic() - arrival, since_arrival_s=time.monotonic() - arrival,
            kv_stores=self.dispatcher.stores.members(), recompute_kv=pending.kv_max_tokens == 0,
            kv_prefix_tokens=pending.kv_max_tokens or 0, kv_suffix_from=pending.kv_suffix_from)
        call = pending.worker.stub.RunTurn(worker_request)
        # A client that leaves cancels the worker's turn at once, not at its next event (a long
        # prefill sends none): gRPC Python does not carry cancellation across hops by itself.
        context.add_callback(call.cancel)
        replayed = 0
        lost_worker = finished = False
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
                    finished = True
                yield event
            return "done"
        except grpc.RpcError as exc:
            if finished:  # only the stream's end was cut (a client gone after the answer)
                return "done"
            code = exc.code()
            lost_worker = code == grpc.StatusCode.UNAVAILABLE or (
                code == grpc.StatusCode.CANCELLED and context.is_active())
            if lost_worker and time.monotonic() - arrival < RETRY_WINDOW_S \
                    and context.is_active() and (not sent or request.temperature == 0):
                log.warning("worker %s lost a turn of %r after %d tokens; re-running",
                            pending.worker.target, request.session_id, len(sent))
                return "retry"
            if not context.is_active():  # our caller left (its client hung up): not a failure
                metrics.TURNS.labels("cancelled").inc()
                return "failed"
            self.failed += 1
            metrics.TURNS.labels("error").inc()
            context.abort(grpc.StatusCode.UNAVAILABLE if lost_worker else code,
                          exc.details() or str(code))
        finally:
            call.cancel()  # no-op once finished; stops the worker if our client left
            self.dispatcher.pool.release(pending.worker, failed=lost_worker)
            self.dispatcher.wake()

    def _turn_finished(self, session_id: str, summary: common_pb2.TurnSummary) -> None:
        self.finished += 1
        metrics.observe_turn(summary)  # counts the turn as ok, too
        if self.dispatcher.restore is not None:
            self.dispatcher.restore.observe(summary)
        self.dispatcher.stores.turn_complete(session_id, summary.completion_tokens)
