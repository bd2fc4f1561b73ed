"""An in-process OTLP/gRPC trace collector: what Jaeger receives, kept in a list for asserts."""
from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass
class Span:
    service: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    name: str
    kind: int
    attributes: dict = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0


def _value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self):
        self.spans: list[Span] = []
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a process needs to export here, quickly."""
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint, "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_BSP_SCHEDULE_DELAY": "100"}

    def Export(self, request, context):
        received = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    received.append(Span(
                        resource.get("service.name", ""), s.trace_id.hex(), s.span_id.hex(),
                        s.parent_span_id.hex(), s.name, s.kind,
                        {a.key: _value(a.value) for a in s.attributes},
                        s.start_time_unix_nano, s.end_time_unix_nano))
        with self._lock:
            self.spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()

    def trace(self, trace_id: str) -> list[Span]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, predicate, timeout: float = 30.0) -> bool:
        """Poll until predicate(self) holds (exports are batched)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self):
                return True
            time.sleep(0.1)
        return predicate(self)

    def start(self) -> "Collector":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(0)

    def __enter__(self) -> "Collector":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
