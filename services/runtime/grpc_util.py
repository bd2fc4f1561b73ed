"""gRPC bootstrap shared by every service: servers with health checking, channels, limits,
keepalives, and the cluster token on every internal call (services/runtime/cluster_auth.py).

The top of services/runtime's import graph for gRPC: it builds on tls.py (credentials, the
process-wide TLS), cluster_auth.py (the token interceptors, the process-wide token),
tracing.py (span interceptors) and health.py (the health service, with List); none of them
imports it."""
from __future__ import annotations

import os
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime import tracing
from services.runtime.health import HealthServicer, add_health
from services.runtime.cluster_auth import TokenCheck, TokenSender, aio_senders, cluster_token
from services.runtime.config_checks import ListenError
from services.runtime.rpc_errors import GUARD
from services.runtime.tls import TLSFiles, TLSMaterial, load as load_tls, process_material

# KV moves in chunks of at most 2 MiB; the 4 MiB default message limit stays as it is.
CHUNK_BYTES = 2 << 20
MAX_MESSAGE_BYTES = 4 << 20
PROBE_THREADS = 4  # each server's threads for health probes (Check, List), apart from its own
KEEPALIVE_ENV = "BIDAW_GRPC_KEEPALIVE_S"  # seconds between pings on every channel (default 10)


def keepalive_s() -> float:
    try:
        value = float(os.environ.get(KEEPALIVE_ENV, "") or 10.0)
    except ValueError:
        raise ValueError(f"{KEEPALIVE_ENV} must be a number of seconds") from None
    if not value >= 0.5:
        raise ValueError(f"{KEEPALIVE_ENV} must be at least 0.5 s")
    return value


RECONNECT_BACKOFF_MS = (250, 2_000)  # a channel's first and longest wait between dials


def client_options() -> list[tuple[str, int]]:
    """Every channel: our message limits, a ping every keepalive_s() even while idle, so a dead
    peer (or a NAT that forgot the flow) is noticed in seconds, and reconnects at most
    RECONNECT_BACKOFF_MS[1] apart. gRPC's default backoff grows to 120 s, for a client among
    thousands on the internet; a member of a cluster that dials a restarting peer (a healed
    store, a worker still loading its model) kept waiting 10 s and more after it was back."""
    ping_ms = int(keepalive_s() * 1000)
    first_ms, max_ms = RECONNECT_BACKOFF_MS
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", ping_ms),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", first_ms),
        ("grpc.min_reconnect_backoff_ms", first_ms),
        ("grpc.max_reconnect_backoff_ms", max_ms),
    ]


def server_options() -> list[tuple[str, int]]:
    """Every server: accept the clients' pings. gRPC's default server policy allows one ping
    per 5 minutes without data and answers more with GOAWAY too_many_pings, which killed every
    call (a long prefill, the idle Awareness stream) after about a minute of 10-s pings."""
    ping_ms = int(keepalive_s() * 1000)
    return client_options() + [
        # GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS: its string has no "recv"
        ("grpc.http2.min_ping_interval_without_data_ms", ping_ms // 2),
        ("grpc.http2.max_ping_strikes", 2),
        # gRPC binds with SO_REUSEPORT by default: a second scheduler on a port in use started
        # and silently shared its connections with the first. Off, it fails to bind.
        ("grpc.so_reuseport", 0),
    ]

# The `tls=`/`token=` default of every Server and channel: the process-wide setting that
# configure_tls (services/runtime/tls.py) and configure_token (cluster_auth.py) installed at start,
# so the services need no TLS or token plumbing of their own.
PROCESS = object()


def _material(tls, server: bool) -> TLSMaterial | None:
    if tls is PROCESS:
        return process_material()
    if isinstance(tls, TLSFiles):
        return load_tls(tls, server=server) if tls.enabled else None
    return tls  # a TLSMaterial or None (plaintext)


class Server:
    """A started gRPC server with the standard health service; `port` is the bound port.
    When tracing is on (services.runtime.tracing.init_tracing ran first) it continues callers' traces."""

    def __init__(self, address: str, services: list[tuple[object, object]], *, name: str,
                 max_workers: int = 64, interceptors: tuple = (), tls=PROCESS,
                 max_concurrent_rpcs: int | None = None, token=PROCESS):
        """`token`: the cluster token every call but the health service's must carry (the
        process-wide one by default; "" or None: none checked)."""
        self.name = name
        token = cluster_token() if token is PROCESS else token
        # The check comes first: an unauthenticated call reaches no handler and no tracing.
        guard = (TokenCheck(token),) if token else ()
        self.max_concurrent_rpcs = max_concurrent_rpcs
        # max_concurrent_rpcs: calls beyond it get RESOURCE_EXHAUSTED at once instead of
        # waiting, unseen, in gRPC's own unbounded queue for a thread.
        self.grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers,
                                                           thread_name_prefix=name),
                                options=server_options(),
                                maximum_concurrent_rpcs=max_concurrent_rpcs,
                                # GUARD: unparsable requests and bad input are INVALID_ARGUMENT
                                interceptors=(*guard, GUARD, *tracing.server_interceptors(),
                                              *interceptors))
        for add_fn, servicer in services:
            add_fn(servicer, self.grpc)
        # Health probes (open to all) run in their own threads: a stranger holding them holds
        # none of the threads the service's own calls need (services/runtime/health.py).
        self._probe_pool = futures.ThreadPoolExecutor(max_workers=PROBE_THREADS,
                                                      thread_name_prefix=f"{name}-probe")
        self.health = HealthServicer()
        add_health(self.health, self.grpc, self._probe_pool)
        material = _material(tls, server=True)
        self.tls = material is not None
        try:
            self.port = (self.grpc.add_secure_port(address, material.server_credentials())
                         if material else self.grpc.add_insecure_port(address))
        except RuntimeError:  # grpc's "Failed to bind": a message only, said in one line
            self.port = 0
        if self.port == 0:
            raise ListenError("--listen", address, "the port is in use, or the host is not "
                                                   "one of this machine's addresses")
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
        self._probe_pool.shutdown(wait=False, cancel_futures=True)

    def wait(self) -> None:
        self.grpc.wait_for_termination()


def _token_source(token):
    """What a client interceptor calls for the token: the process-wide one at call time."""
    return cluster_token if token is PROCESS else (lambda: token or "")


def channel(target: str, tls=PROCESS, token=PROCESS) -> grpc.Channel:
    """A channel with our message limits and keepalives, TLS when configured (`tls`: the
    process-wide setting, or TLSFiles/TLSMaterial, or None for plaintext), the cluster token on
    every call (`token`: the process-wide one, or a string; None: none); each call is a span
    and carries the trace context when tracing is on."""
    material = _material(tls, server=False)
    if material is None:
        raw = grpc.insecure_channel(target, options=client_options())
    else:
        raw = grpc.secure_channel(target, material.channel_credentials(),
                                  options=client_options() + material.channel_options())
    return tracing.intercept_channel(grpc.intercept_channel(raw, TokenSender(_token_source(token))))


def aio_channel(target: str, tls=PROCESS, options: list | None = None,
                token=PROCESS) -> grpc.aio.Channel:
    """channel() for asyncio clients (the gateway, replay); no tracing interceptor (they trace
    calls themselves). `options`: instead of the project's limits and keepalives."""
    material = _material(tls, server=False)
    options = list(client_options() if options is None else options)
    interceptors = aio_senders(_token_source(token))
    if material is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(target, material.channel_credentials(),
                                   options=options + material.channel_options(),
                                   interceptors=interceptors)


def why_unanswered(target: str, probe, timeout: float = 5.0, tls=PROCESS) -> str | None:
    """None if `probe(channel, timeout)`, one read-only call with the process's cluster token,
    succeeds against `target`; else why not, in words: for a client command to say before it
    starts (a replay against nothing, or without the token, ran its whole plan of failed turns
    and exited 0)."""
    with channel(target, tls) as ch:
        try:
            probe(ch, timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"nothing answered in {timeout:g} s"
            hint = {grpc.StatusCode.UNAVAILABLE: " (is the deployment running?)",
                    grpc.StatusCode.UNAUTHENTICATED: " (give --cluster-token-file FILE: "
                                                     "`bidaw up` prints its path)"}
            return f"{exc.code().name}: {exc.details()}{hint.get(exc.code(), '')}"
    return None


def wait_healthy(target: str, timeout: float = 60.0, service: str = "",
                 alive=lambda: True, tls=PROCESS) -> None:
    """Block until `target` reports SERVING; TimeoutError after `timeout` or once `alive()`
    turns false (the process serving it died). Each try dials afresh: one channel waits out its
    reconnect backoff (up to RECONNECT_BACKOFF_MS[1]) between dials, so a service that had just
    begun to listen was seen up to 2 s late, at every start of a deployment's services."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        with channel(target, tls) as ch:
            try:
                reply = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=2.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
        if time.monotonic() > deadline or not alive():
            raise TimeoutError(f"{target} not healthy after {timeout:.0f}s")
        time.sleep(0.2)
