"""The standard gRPC health service, with its List method: grpcio-health-checking's servicer
leaves List unimplemented, so a probe that lists (grpc-health-probe, a mesh) logged an ERROR
with a traceback in every service and got UNIMPLEMENTED."""
from __future__ import annotations

import threading

from grpc_health.v1 import health, health_pb2


class HealthServicer(health.HealthServicer):
    """Check and Watch as grpc's; List answers every status set here."""

    def __init__(self) -> None:
        super().__init__()
        self._statuses: dict[str, int] = {"": health_pb2.HealthCheckResponse.SERVING}
        self._statuses_lock = threading.Lock()

    def set(self, service: str, status) -> None:
        with self._statuses_lock:
            self._statuses[service] = status
        super().set(service, status)

    def List(self, request, context) -> health_pb2.HealthListResponse:
        with self._statuses_lock:
            statuses = dict(self._statuses)
        return health_pb2.HealthListResponse(statuses={
            name: health_pb2.HealthCheckResponse(status=s) for name, s in statuses.items()})
