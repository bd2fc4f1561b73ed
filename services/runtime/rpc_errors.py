"""No gRPC method answers UNKNOWN, or INTERNAL with a traceback, for bad input.

A request gRPC cannot parse (a proto3 string that is not UTF-8, a truncated varint, a wrong
wire type) would otherwise be answered INTERNAL "Exception deserializing request!" with a
traceback in the server's log, and an exception escaping a servicer becomes UNKNOWN carrying the
exception's text. `GUARD`, a server interceptor, makes every method's deserializer tolerant: an
unparsable message reaches the method as a marker and is answered INVALID_ARGUMENT, short and
without a traceback, before the method runs (for a request stream, when the method reaches it).
Servicers raise BadRequest (or a subclass with another code) for values that parse but are out
of range. Whatever else escapes is a bug: INTERNAL with its type only, the traceback logged.

Install with one line: `interceptors=(GUARD,)` where the gRPC server is built.
"""
from __future__ import annotations

import logging

import grpc

log = logging.getLogger("bidaw.rpc")
MAX_DETAIL = 200  # characters of a status message: enough to say what, never a dump


class BadRequest(ValueError):
    """A request that parsed but cannot be served as asked; its message goes to the caller."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class _Unparsable:
    """What a tolerant deserializer returns for bytes that are not the expected message."""
    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def _tolerant(deserializer):
    if deserializer is None:
        return None

    def parse(raw: bytes):
        try:
            return deserializer(raw)
        except Exception as exc:  # DecodeError, UnicodeDecodeError...: the bytes are bad
            return _Unparsable(f"the request message does not parse: {exc}")
    return parse


def _checked(request):
    if isinstance(request, _Unparsable):
        raise BadRequest(request.reason)
    return request


def _checked_stream(requests):
    for request in requests:
        yield _checked(request)


def _has_status(context) -> bool:
    """The method already chose a status (context.abort raises a plain Exception after it)."""
    code = context.code()
    return code is not None and code != grpc.StatusCode.OK


def _fail(context, method: str, exc: Exception):
    if _has_status(context):
        raise exc
    if isinstance(exc, BadRequest):
        log.info("%s: refused %s: %s", method, exc.code.name, exc)
        context.abort(exc.code, str(exc)[:MAX_DETAIL])
    if isinstance(exc, grpc.RpcError) and isinstance(exc, grpc.Call):  # a call it made failed
        log.warning("%s: a downstream call failed: %s %s", method, exc.code(), exc.details())
        context.abort(exc.code(), f"a downstream call failed: {exc.details()}"[:MAX_DETAIL])
    log.error("%s failed", method, exc_info=exc)
    context.abort(grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}); "
                  "see the server log")


def _callback_style(behavior, method: str):
    """A method that answers through gRPC's send_response_callback and returns at once
    (grpc_health's Watch): wrapped as a generator it would hold a server thread for as long as
    its stream stays open, and a few dozen watches would take every thread of the server."""
    def callback_style(request, context, send_response_callback=None):
        try:
            return behavior(_checked(request), context, send_response_callback)
        except Exception as exc:
            _fail(context, method, exc)
    callback_style.experimental_non_blocking = True
    callback_style.experimental_thread_pool = getattr(behavior, "experimental_thread_pool", None)
    return callback_style


def _wrap(behavior, method: str, request_stream: bool, response_stream: bool):
    if response_stream and not request_stream and \
            getattr(behavior, "experimental_non_blocking", False):
        return _callback_style(behavior, method)
    wrapper = _wrap_plain(behavior, method, request_stream, response_stream)
    # the method's own thread pool (the health probes'), if it has one, stays its pool
    wrapper.experimental_thread_pool = getattr(behavior, "experimental_thread_pool", None)
    return wrapper


def _wrap_plain(behavior, method: str, request_stream: bool, response_stream: bool):
    check = _checked_stream if request_stream else _checked
    if response_stream:
        def streaming(request, context):
            try:
                yield from behavior(check(request), context)
            except Exception as exc:
                _fail(context, method, exc)
        return streaming

    def unary(request, context):
        try:
            return behavior(check(request), context)
        except Exception as exc:
            _fail(context, method, exc)
    return unary


_FACTORIES = {(False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
              (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
              (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
              (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler)}


def guarded(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    kinds = (bool(handler.request_streaming), bool(handler.response_streaming))
    attr, factory = _FACTORIES[kinds]
    return factory(_wrap(getattr(handler, attr), method, *kinds),
                   request_deserializer=_tolerant(handler.request_deserializer),
                   response_serializer=handler.response_serializer)


class Guard(grpc.ServerInterceptor):
    def intercept_service(self, continuation, handler_call_details):
        handler = continuation(handler_call_details)
        if handler is None:  # unknown method: gRPC answers UNIMPLEMENTED itself
            return None
        return guarded(handler, handler_call_details.method)


GUARD = Guard()
