"""OpenTelemetry tracing for every Bidaw process, configured by the standard OTEL_* variables.

Tracing is on only when OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
OTEL_TRACES_EXPORTER (other than "none") is set and OTEL_SDK_DISABLED is not "true". When off,
nothing is installed: `span()` hands back one shared no-op span, `inject()` an empty dict, and
gRPC servers and channels get no interceptors, so the cost is a flag test per call.

Adoption (see docs/observability.md):

    init_tracing("scheduler")                 # once, before servers and channels exist
    with span("scheduler.ready_queue", session=sid) as s:  # bidaw.session=sid
        ...; s.set_attribute("bidaw.queue_s", waited)
    carrier = inject()                        # into a Ray actor call ...
    with span("worker.turn", parent=extract(carrier)):     # ... and out on the other side
    record_span("worker.decode", t_first_token, t_last, parent=ctx, tokens=n)  # after the fact
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Mapping

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

log = logging.getLogger("bidaw.tracing")

# Long-lived or noisy RPCs that must not become spans: a health probe every 200 ms, and the
# Awareness stream whose single span would last for the life of the process.
UNTRACED_METHODS = frozenset({
    "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
    "/grpc.health.v1.Health/List",
    "/bidaw.v1.KVStore/Awareness",
})

SERVER = trace.SpanKind.SERVER
CLIENT = trace.SpanKind.CLIENT
INTERNAL = trace.SpanKind.INTERNAL

_NOOP = trace.INVALID_SPAN  # a NonRecordingSpan: usable as a context manager, ends as a no-op
_lock = threading.Lock()
_provider = None  # the SDK TracerProvider once init_tracing turned tracing on
_tracer: trace.Tracer | None = None
_service = ""


def configured(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the OTEL_* environment asks for traces to be exported."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def enabled() -> bool:
    return _tracer is not None


def service_name() -> str:
    return _service


def init_tracing(service_name: str) -> bool:
    """Turn tracing on for this process if the environment asks for it; returns whether it is on.

    `service_name` becomes the resource's service.name (gateway, scheduler, kv-store,
    compute-worker). It wins over OTEL_SERVICE_NAME because one launcher environment is shared by
    all four processes; distinguish deployments with OTEL_RESOURCE_ATTRIBUTES instead. Calling it
    again in the same process does nothing.
    """
    global _provider, _tracer, _service
    with _lock:
        if _tracer is not None or not configured():
            return _tracer is not None
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(_exporter()))
        trace.set_tracer_provider(provider)
        _provider, _service = provider, service_name
        _tracer = provider.get_tracer("bidaw")
    log.info("tracing on: service.name=%s", service_name)
    return True


def _exporter():
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    if kind == "console":  # for a quick look without a collector
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if kind != "otlp":
        raise ValueError(f"OTEL_TRACES_EXPORTER={kind!r}: only otlp (gRPC), console or none")
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, TLS, timeout: from OTEL_EXPORTER_OTLP_*


def shutdown() -> None:
    """Flush and stop exporting (also done at interpreter exit)."""
    if _provider is not None:
        _provider.shutdown()


def span(name: str, parent: otel_context.Context | None = None, kind: trace.SpanKind = INTERNAL,
         **attributes: Any):
    """A context manager opening a span that is current inside it; it yields the span.

    Keyword attributes are prefixed with "bidaw." unless they already contain a dot, and None
    values are dropped. `parent` is a context from `extract()`; default: the current span.
    """
    if _tracer is None:
        return _NOOP
    return _tracer.start_as_current_span(name, context=parent, kind=kind,
                                         attributes=_attributes(attributes))


def record_span(name: str, start_monotonic: float, end_monotonic: float,
                parent: otel_context.Context | None = None, **attributes: Any) -> None:
    """Emit a finished span after the fact, from two time.monotonic() readings: for work that
    happens in another thread's loop (a batched engine's prefill and decode of one sequence)."""
    if _tracer is None:
        return
    import time

    offset_ns = time.time_ns() - int(time.monotonic() * 1e9)
    s = _tracer.start_span(name, context=parent, attributes=_attributes(attributes),
                           start_time=offset_ns + int(start_monotonic * 1e9))
    s.end(end_time=offset_ns + int(end_monotonic * 1e9))


def current() -> otel_context.Context | None:
    """The current context, to hand to record_span(parent=...) from another thread."""
    return otel_context.get_current() if _tracer is not None else None


def _attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {(k if "." in k else f"bidaw.{k}"): v for k, v in attributes.items() if v is not None}


def set_attributes(**attributes: Any) -> None:
    """Add attributes (same naming as span()) to the current span."""
    if _tracer is not None:
        trace.get_current_span().set_attributes(_attributes(attributes))


def inject() -> dict[str, str]:
    """The current trace context as W3C headers ({"traceparent": ...}), for a Ray call."""
    if _tracer is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def extract(carrier: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context carried by `inject()`'s dict, for span(parent=...); None when there is none."""
    if _tracer is None or not carrier:
        return None
    return propagate.extract(carrier)


def current_trace_id() -> str:
    """The current trace id as 32 hex digits, or "" outside a sampled span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else ""


def server_interceptors() -> tuple:
    """gRPC server interceptors that continue the caller's trace (empty when tracing is off)."""
    if _tracer is None:
        return ()
    from opentelemetry.instrumentation.grpc import filters, server_interceptor

    skip = filters.any_of(*(filters.full_method_name(m) for m in UNTRACED_METHODS))
    return (server_interceptor(tracer_provider=_provider, filter_=filters.negate(skip)),)


def intercept_channel(channel: grpc.Channel) -> grpc.Channel:
    """`channel` with a client interceptor that opens a span per call and sends the context in
    the metadata; the channel itself when tracing is off."""
    if _tracer is None:
        return channel
    from services.runtime.tracing_grpc import ClientInterceptor

    return grpc.intercept_channel(channel, ClientInterceptor(_tracer, UNTRACED_METHODS))

