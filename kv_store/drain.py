"""A store told to stop drains: it refuses new calls and lets the ones in flight finish.

A compute worker streams a turn's KV to the store after the turn (WriteKV, or PrepareShmWrite,
its own writes into the regions, then WriteKV naming them). A store that stopped at once on
SIGTERM (a rolling restart, Kubernetes) cut those writes after a 2-s grace, and the conversation
recomputed its whole history at its next turn. Draining (main.py), the store:

- answers health probes NOT_SERVING, and every new call that would start work UNAVAILABLE with
  a message (Lookup, ReadKV, OpenShmRead, Promote, PrepareShmWrite, a streamed WriteKV, a new
  Awareness stream): its client retries on another store or once this one is back;
- still answers a WriteKV naming regions prepared before the drain (the worker was writing
  into them when the signal came: that write is in flight, only its last call is new), and
  ReleaseLease, ShmInfo and Stats, which start nothing;
- waits, at most `--drain-seconds`, for the calls in flight, the prepared regions whose WriteKV
  has yet to come, and the SSD copies of writes acknowledged before they were durable.

Awareness streams already open are not waited for (they last as long as their client): the stop
after the drain ends them."""
from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager
from typing import Callable

import grpc

SERVICE_PREFIX = "/bidaw.v1.KVStore/"
STARTS_NOTHING = {"ReleaseLease", "ShmInfo", "Stats"}  # answered while draining, not waited for
NOT_WAITED_FOR = {"Awareness"}  # lasts as long as its client: refused new, not waited for
REFUSED = ("the KV store is stopping: it finishes the calls in flight and takes no new ones; "
           "retry on another store, or once this one is back")
POLL_S = 0.05  # how often the drain looks at the store's unfinished writes


class DrainGate(grpc.ServerInterceptor):
    """Counts the store's calls in flight; once `drain` began, refuses new ones (UNAVAILABLE)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running = 0
        self._draining = False

    def begin(self) -> None:
        """Refuse new calls from now on."""
        with self._cond:
            self._draining = True

    def wait(self, timeout: float, unfinished: Callable[[], int] = lambda: 0) -> int:
        """Wait until no call is in flight and `unfinished()` is 0, at most `timeout` seconds.
        The calls still running then."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            with self._cond:
                if self._running and left > 0:
                    self._cond.wait(min(POLL_S, left))  # woken as a call ends
                    continue
                running = self._running
            if left <= 0 or unfinished() == 0:
                return running
            time.sleep(min(POLL_S, left))

    @contextmanager
    def _call(self, context, admitted_while_draining: bool = False, counted: bool = True):
        with self._cond:
            if self._draining and not admitted_while_draining:
                refuse = True
            else:
                refuse = False
                if counted:
                    self._running += 1
        if refuse:
            context.abort(grpc.StatusCode.UNAVAILABLE, REFUSED)
        try:
            yield
        finally:
            if counted:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _draining_now(self) -> bool:
        with self._cond:
            return self._draining

    # -- the interceptor ----------------------------------------------------------------------

    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(SERVICE_PREFIX):
            return handler  # the health service answers throughout (NOT_SERVING)
        name = method[len(SERVICE_PREFIX):]
        if name in STARTS_NOTHING:
            return handler
        kinds = (bool(handler.request_streaming), bool(handler.response_streaming))
        attr, factory = _FACTORIES[kinds]
        behavior = getattr(handler, attr)
        if kinds == (True, False):  # WriteKV
            wrapped = self._write(behavior)
        elif kinds[1]:
            wrapped = self._streaming(behavior, counted=name not in NOT_WAITED_FOR)
        else:
            wrapped = self._unary(behavior)
        return factory(wrapped, request_deserializer=handler.request_deserializer,
                       response_serializer=handler.response_serializer)

    def _unary(self, behavior):
        def unary(request, context):
            with self._call(context):
                return behavior(request, context)
        return unary

    def _streaming(self, behavior, counted: bool):
        def streaming(request, context):
            with self._call(context, counted=counted):
                yield from behavior(request, context)
        return streaming

    def _write(self, behavior):
        def write(requests, context):
            requests = iter(requests)
            shm = False
            if self._draining_now():  # only a write into regions prepared before goes on
                first = next(requests, None)
                shm = first is not None and first.WhichOneof("kind") == "header" \
                    and bool(first.header.shm_region)
                requests = itertools.chain(() if first is None else (first,), requests)
            with self._call(context, admitted_while_draining=shm):
                return behavior(requests, context)
        return write


_FACTORIES = {(False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
              (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
              (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
              (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler)}
