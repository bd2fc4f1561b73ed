"""gRPC bootstrap shared by every service: servers with health checking, channels, limits."""
from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from . import tracing

# KV moves in chunks of at most 2 MiB; the 4 MiB default message limit stays as it is.
CHUNK_BYTES = 2 << 20
MAX_MESSAGE_BYTES = 4 << 20
_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


class Server:
    """A started gRPC server with the standard health service; `port` is the bound port.
    When tracing is on (services.tracing.init_tracing ran first) it continues callers' traces."""

    def __init__(self, address: str, services: list[tuple[object, object]], *, name: str,
                 max_workers: int = 64, interceptors: tuple = ()):
        self.name = name
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix=name),
                                options=_OPTIONS,
                                interceptors=(*tracing.server_interceptors(), *interceptors))
        for add_fn, servicer in services:
            add_fn(servicer, self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        self.port = self.grpc.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"{name}: cannot listen on {address}")
        self.grpc.start()
        self.set_serving(True)

    def set_serving(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        self.health.set("", status)
        self.health.set(self.name, status)

    def stop(self, grace: float = 2.0) -> None:
        self.set_serving(False)
        self.grpc.stop(grace).wait()

    def wait(self) -> None:
        self.grpc.wait_for_termination()


def channel(target: str) -> grpc.Channel:
    """An insecure channel with our message limits and keepalives; each call is a span and
    carries the trace context when tracing is on."""
    return tracing.intercept_channel(grpc.insecure_channel(target, options=_OPTIONS))


def wait_healthy(target: str, timeout: float = 60.0, service: str = "",
                 alive=lambda: True) -> None:
    """Block until `target` reports SERVING; TimeoutError after `timeout` or once `alive()`
    turns false (the process serving it died)."""
    import time

    deadline = time.monotonic() + timeout
    with channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        while True:
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline or not alive():
                raise TimeoutError(f"{target} not healthy after {timeout:.0f}s")
            time.sleep(0.2)
