"""Health.Watch, the one streaming method of the health service: a stranger may not open it (its
streams never end), and a member's watches hold no server thread. Before, Watch was open like
Check, and GUARD's wrapper made grpc_health's callback-style Watch a blocking generator, so 64
watches without the token took every thread of a KV store or worker and every turn stalled
until they hung up (measured: a 0.7-s turn took 84 s while 70 watches were open)."""
from __future__ import annotations

import queue
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime.grpc_util import Server, channel

TOKEN = "watch-test-token"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _server(workers: int = 2) -> Server:
    return Server("127.0.0.1:0", [], name="bidaw.v1.Test", max_workers=workers, token=TOKEN)


def _watch(stub, received: queue.Queue):
    call = stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)

    def drain():
        try:
            for reply in call:
                received.put(reply.status)
        except grpc.RpcError as exc:
            received.put(exc.code())
    threading.Thread(target=drain, daemon=True).start()
    return call


def test_watch_needs_the_token_while_check_and_list_stay_open():
    server = _server()
    try:
        with channel(f"127.0.0.1:{server.port}", token="") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING
            assert stub.List(health_pb2.HealthListRequest(), timeout=5).statuses[""].status \
                == SERVING
            started = time.monotonic()
            try:
                next(iter(stub.Watch(health_pb2.HealthCheckRequest(), timeout=10)))
                raise AssertionError("a watch without the token was let in")
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.UNAUTHENTICATED
            assert time.monotonic() - started < 5
    finally:
        server.stop(0)


def test_members_watches_hold_no_thread_and_still_hear_changes():
    server = _server(workers=2)
    calls = []
    try:
        with channel(f"127.0.0.1:{server.port}", token=TOKEN) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            streams = [queue.Queue() for _ in range(8)]  # 4x the server's threads
            calls = [_watch(stub, q) for q in streams]
            for q in streams:  # every watch got its first answer: none waited for a thread
                assert q.get(timeout=10) == SERVING
            started = time.monotonic()
            assert stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == SERVING
            assert time.monotonic() - started < 2.0
            server.set_serving(False)
            for q in streams:  # the callback path still delivers updates
                assert q.get(timeout=10) == NOT_SERVING
            for call in calls:
                call.cancel()
    finally:
        for call in calls:
            call.cancel()
        server.stop(0)
