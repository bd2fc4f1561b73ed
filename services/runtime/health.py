"""The standard gRPC health service, with its List method: grpcio-health-checking's servicer
leaves List unimplemented, so a probe that lists (grpc-health-probe, a mesh) logged an ERROR
with a traceback in every service and got UNIMPLEMENTED.

Check and List need no token, so anyone who reaches the port may call them. gRPC reads a unary
call's message in a server thread before any handler runs, and waits for it without a
deadline: a stranger's calls that send headers and never a message held the probe threads for
as long as their connections stayed open, and every probe after them (a kubelet's liveness
probe: the pod restarted) timed out. So Check and List are registered as client-streaming
methods (the same bytes on the wire as unary: one message, then the end): the handler reads the
message itself and cancels a call whose message has not come within PROBE_MESSAGE_S.
"""
from __future__ import annotations

import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2

SERVICE = "grpc.health.v1.Health"
PROBE_MESSAGE_S = 2.0  # a probe's message follows its headers at once; none by then: cut off


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


def add_health(servicer: HealthServicer, server: grpc.Server,
               probe_pool: futures.ThreadPoolExecutor) -> None:
    """Serve `servicer` on `server`; Check and List in `probe_pool`'s threads, apart from the
    service's own, and never longer than PROBE_MESSAGE_S for a message that does not come."""
    check, reply = health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse
    handlers = {
        "Check": grpc.stream_unary_rpc_method_handler(
            _first_message(servicer.Check, reply, probe_pool),
            request_deserializer=check.FromString, response_serializer=reply.SerializeToString),
        "List": grpc.stream_unary_rpc_method_handler(
            _first_message(servicer.List, health_pb2.HealthListResponse, probe_pool),
            request_deserializer=health_pb2.HealthListRequest.FromString,
            response_serializer=health_pb2.HealthListResponse.SerializeToString),
        "Watch": grpc.unary_stream_rpc_method_handler(
            servicer.Watch, request_deserializer=check.FromString,
            response_serializer=reply.SerializeToString),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))


def _first_message(method, reply_type, pool: futures.ThreadPoolExecutor):
    def probe(requests, context):
        cut_off = threading.Timer(PROBE_MESSAGE_S, context.cancel)
        cut_off.daemon = True
        cut_off.start()
        try:
            request = next(requests, None)
        except grpc.RpcError:  # cancelled: no message came in time, or the caller left
            return reply_type()  # (not sent: the call is over)
        finally:
            cut_off.cancel()
        if request is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "a health probe sends one message")
        return method(request, context)
    probe.experimental_thread_pool = pool  # grpc runs the call in this pool
    return probe
