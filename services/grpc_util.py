"""gRPC bootstrap shared by every service: servers with health checking, channels, limits."""
from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from . import tracing
from .tls import TLSFiles, TLSMaterial, load as load_tls

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

# The process-wide TLS setting, installed once at start (configure_tls) and used by every Server
# and channel() that is not given one: the services then need no TLS plumbing of their own.
PROCESS = object()  # the `tls=` default: use the process-wide setting
_tls: TLSMaterial | None = None
_tls_files: TLSFiles | None = None


def configure_tls(files: TLSFiles | None, *, server: bool = True) -> None:
    """Check `files` and use them for every Server and channel of this process from now on
    (None: plaintext). `server`: this process serves, so it needs a cert and key, and a CA
    given means mTLS. TLSConfigError (naming the flag) when they cannot work."""
    global _tls, _tls_files
    _tls = load_tls(files, server=server) if files is not None and files.enabled else None
    _tls_files = files if _tls is not None else None


def tls_files() -> TLSFiles | None:
    """The process-wide TLS files (for a child process, e.g. the Ray engine actor)."""
    return _tls_files


def _material(tls, server: bool) -> TLSMaterial | None:
    if tls is PROCESS:
        return _tls
    if isinstance(tls, TLSFiles):
        return load_tls(tls, server=server) if tls.enabled else None
    return tls  # a TLSMaterial or None (plaintext)


class Server:
    """A started gRPC server with the standard health service; `port` is the bound port.
    When tracing is on (services.tracing.init_tracing ran first) it continues callers' traces."""

    def __init__(self, address: str, services: list[tuple[object, object]], *, name: str,
                 max_workers: int = 64, interceptors: tuple = (), tls=PROCESS,
                 max_concurrent_rpcs: int | None = None):
        self.name = name
        self.max_concurrent_rpcs = max_concurrent_rpcs
        # max_concurrent_rpcs: calls beyond it get RESOURCE_EXHAUSTED at once instead of
        # waiting, unseen, in gRPC's own unbounded queue for a thread.
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix=name),
                                options=_OPTIONS, maximum_concurrent_rpcs=max_concurrent_rpcs,
                                interceptors=(*tracing.server_interceptors(), *interceptors))
        for add_fn, servicer in services:
            add_fn(servicer, self.grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc)
        material = _material(tls, server=True)
        self.tls = material is not None
        self.port = (self.grpc.add_secure_port(address, material.server_credentials())
                     if material else self.grpc.add_insecure_port(address))
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


def channel(target: str, tls=PROCESS) -> grpc.Channel:
    """A channel with our message limits and keepalives, TLS when configured (`tls`: the
    process-wide setting, or TLSFiles/TLSMaterial, or None for plaintext); each call is a span
    and carries the trace context when tracing is on."""
    material = _material(tls, server=False)
    if material is None:
        return tracing.intercept_channel(grpc.insecure_channel(target, options=_OPTIONS))
    return tracing.intercept_channel(grpc.secure_channel(
        target, material.channel_credentials(), options=_OPTIONS + material.channel_options()))


def aio_channel(target: str, tls=PROCESS, options: list | None = None) -> grpc.aio.Channel:
    """channel() for asyncio clients (the gateway, replay); no tracing interceptor (they trace
    calls themselves). `options`: instead of the project's limits and keepalives."""
    material = _material(tls, server=False)
    options = list(_OPTIONS if options is None else options)
    if material is None:
        return grpc.aio.insecure_channel(target, options=options)
    return grpc.aio.secure_channel(target, material.channel_credentials(),
                                   options=options + material.channel_options())


def wait_healthy(target: str, timeout: float = 60.0, service: str = "",
                 alive=lambda: True, tls=PROCESS) -> None:
    """Block until `target` reports SERVING; TimeoutError after `timeout` or once `alive()`
    turns false (the process serving it died)."""
    import time

    deadline = time.monotonic() + timeout
    with channel(target, tls) as ch:
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
