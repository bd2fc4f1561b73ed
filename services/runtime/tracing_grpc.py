"""A gRPC client interceptor that opens a CLIENT span per call and sends its context along.

Written against grpc's own interceptor API rather than opentelemetry's grpcext wrapper because
that wrapper turns a response stream into a plain generator: the caller loses the Call object,
and the scheduler's `call.cancel()` (stop a worker whose client left) would break. Here the
continuation's Call is returned untouched and the span ends in its done-callback.
"""
from __future__ import annotations

import collections

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import Status, StatusCode


class _Details(collections.namedtuple("_Details", ("method", "timeout", "metadata", "credentials",
                                                   "wait_for_ready", "compression")),
               grpc.ClientCallDetails):
    pass


def rpc_attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def finish(span: trace.Span, code: grpc.StatusCode | None, details: str | None) -> None:
    if code is not None:
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, f"{code.name}: {details or ''}"))
    span.end()


class ClientInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                        grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    def __init__(self, tracer: trace.Tracer, untraced: frozenset[str]):
        self._tracer = tracer
        self._untraced = untraced

    def _intercept(self, continuation, details, request):
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method in self._untraced:
            return continuation(details, request)
        span = self._tracer.start_span(method.lstrip("/"), kind=trace.SpanKind.CLIENT,
                                       attributes=rpc_attributes(method))
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        metadata = list(details.metadata or ()) + list(carrier.items())
        details = _Details(details.method, details.timeout, metadata, details.credentials,
                           details.wait_for_ready, getattr(details, "compression", None))
        try:
            call = continuation(details, request)
        except Exception as exc:
            span.record_exception(exc)
            finish(span, grpc.StatusCode.UNKNOWN, str(exc))
            raise
        call.add_done_callback(lambda c: finish(span, c.code(), c.details()))
        return call

    intercept_unary_unary = _intercept
    intercept_unary_stream = _intercept
    intercept_stream_unary = _intercept
    intercept_stream_stream = _intercept
