"""The standard gRPC health service, with its List method: grpcio-health-checking's servicer
leaves List unimplemented, so a probe that lists (grpc-health-probe, a mesh) logged an ERROR
with a traceback in every service and got UNIMPLEMENTED."""
from __future__ import annotations

import threading
from concurrent import futures

from grpc_health.v1 import health, health_pb2


class HealthServicer(health.HealthServicer):
    """Check and Watch as grpc's; List answers every status set here.

    `probe_pool`: the threads Check and List run in (None: the server's). They need no token, and
    gRPC waits in a thread for a unary call's request message, without a deadline: a stranger's
    probes that never send one then hold only this pool's threads, never the server's."""

    def __init__(self, probe_pool: futures.ThreadPoolExecutor | None = None) -> None:
        super().__init__()
        self._statuses: dict[str, int] = {"": health_pb2.HealthCheckResponse.SERVING}
        self._statuses_lock = threading.Lock()
        if probe_pool is not None:  # per instance: other servers of the process keep theirs
            self.Check = _in_pool(super().Check, probe_pool)
            self.List = _in_pool(self.List, probe_pool)

    def set(self, service: str, status) -> None:
        with self._statuses_lock:
            self._statuses[service] = status
        super().set(service, status)

    def List(self, request, context) -> health_pb2.HealthListResponse:
        with self._statuses_lock:
            statuses = dict(self._statuses)
        return health_pb2.HealthListResponse(statuses={
            name: health_pb2.HealthCheckResponse(status=s) for name, s in statuses.items()})


def _in_pool(method, pool: futures.ThreadPoolExecutor):
    def in_pool(request, context):
        return method(request, context)
    in_pool.experimental_thread_pool = pool  # grpc runs the call in this pool
    return in_pool
