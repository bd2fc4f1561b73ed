"""Scheduler.Tokenize: the gateway's tokenizer routes, answered by a worker of the served model
(its tokenizer is the one turns use). No turn slot is taken: tokenizing is cheap and must not
wait behind generation; the least loaded healthy worker is asked first, the next on failure."""
from __future__ import annotations

import grpc

from services.runtime.rpc_errors import BadRequest
from services.runtime.tokenize_bounds import tokenize_problem

from scheduler.workers import WorkerPool

PER_WORKER_S = 30.0  # one worker's answer, at most (a 4 MiB text takes a few seconds)
PASSED_ON = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.DEADLINE_EXCEEDED)


def relay_tokenize(pool: WorkerPool, request, context):
    problem = tokenize_problem(request)
    if problem:
        raise BadRequest(problem)
    last = "no worker serves the model yet"
    for worker in pool.by_load():
        left = context.time_remaining()
        try:
            return worker.stub.Tokenize(request, timeout=min(left or PER_WORKER_S,
                                                             PER_WORKER_S))
        except grpc.RpcError as exc:
            if exc.code() in PASSED_ON:  # the request's fault, or the caller's deadline
                context.abort(exc.code(), exc.details() or exc.code().name)
            last = f"worker {worker.target}: {exc.code().name}"
    context.abort(grpc.StatusCode.UNAVAILABLE, f"no worker could tokenize ({last})")
