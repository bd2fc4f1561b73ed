"""Calls a stranger can hold open take none of a server's threads.

Before: (1) Health.Watch was open like Check, and GUARD's wrapper made grpc_health's
callback-style Watch a blocking generator, so 64 watches without the token took every thread
of a KV store or worker and every turn stalled until they hung up (a 0.7-s turn took 84 s while
70 watches were open). (2) gRPC waits in a server thread, without a deadline, for a unary call's
request message, before any handler (the token's refusal included) runs: 70 calls that sent
headers and no message held a store's 64 threads the same way (a turn took 54 s). Now Watch
needs the token, a refusal reads no message, and the open probes (Check, List) have their own
threads."""
from __future__ import annotations

import queue
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.runtime.gen import common_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import PROBE_THREADS, Server, channel
from tests.fake_scheduler import FakeScheduler

TOKEN = "watch-test-token"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def _server(workers: int = 2) -> Server:
    return Server("127.0.0.1:0", [(scheduler_pb2_grpc.add_SchedulerServicer_to_server,
                                   FakeScheduler())],
                  name="bidaw.v1.Scheduler", max_workers=workers, token=TOKEN)


def _bodiless(ch: grpc.Channel, method: str, stop: threading.Event):
    """A call of `method` that sends its headers and never a message (nor its end)."""
    def never():
        stop.wait()
        yield from ()
    return ch.stream_stream(method, request_serializer=bytes,
                            response_deserializer=bytes)(never(), timeout=60)


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


def test_calls_that_never_send_their_message_hold_no_service_thread():
    server = _server(workers=2)
    stop = threading.Event()
    held = []
    try:
        with channel(f"127.0.0.1:{server.port}", token="") as stranger, \
                channel(f"127.0.0.1:{server.port}", token=TOKEN) as member:
            for method in ("/bidaw.v1.Scheduler/Stats", "/bidaw.v1.Scheduler/SubmitTurn",
                           "/bidaw.v1.Scheduler/Nope", "/grpc.health.v1.Health/Check",
                           "/grpc.health.v1.Health/List"):
                held += [_bodiless(stranger, method, stop) for _ in range(2 * PROBE_THREADS)]
            time.sleep(1.0)  # every one of them reached the server
            refused = [c for c in held if c.done()]
            assert refused and {c.code() for c in refused} == {grpc.StatusCode.UNAUTHENTICATED}
            started = time.monotonic()
            turn = common_pb2.TurnRequest(session_id="s", max_tokens=4, messages=[
                common_pb2.ChatMessage(role="user", content="hello")])
            events = list(scheduler_pb2_grpc.SchedulerStub(member).SubmitTurn(turn, timeout=10))
            assert events[0].text == "echo:"
            assert time.monotonic() - started < 3.0
    finally:
        stop.set()
        for call in held:
            call.cancel()
        server.stop(0)


def test_probes_that_never_send_their_message_are_cut_off_and_free_the_probe_threads():
    """A stranger's Check and List calls that send headers and no message used to hold the 4
    probe threads for as long as their connections stayed open: every probe after them timed
    out (a kubelet's liveness probe restarts the pod). Now each is cancelled after
    PROBE_MESSAGE_S, and probes are answered again."""
    from services.runtime.health import PROBE_MESSAGE_S

    server = _server(workers=2)
    stop = threading.Event()
    held = []
    try:
        with channel(f"127.0.0.1:{server.port}", token="") as stranger, \
                channel(f"127.0.0.1:{server.port}", token="") as prober:
            for method in ("/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/List"):
                held += [_bodiless(stranger, method, stop) for _ in range(2 * PROBE_THREADS)]
            stub = health_pb2_grpc.HealthStub(prober)
            started = time.monotonic()
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_MESSAGE_S * 6)
            assert reply.status == SERVING  # the threads came back within the cut-off(s)
            waited = time.monotonic() - started
            assert waited < PROBE_MESSAGE_S * 5
            deadline = time.monotonic() + PROBE_MESSAGE_S * 6
            while not all(c.done() for c in held) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert {c.code() for c in held} == {grpc.StatusCode.CANCELLED}
            # a probe that sends its message is answered at once, as before
            started = time.monotonic()
            assert stub.List(health_pb2.HealthListRequest(), timeout=5).statuses[""].status \
                == SERVING
            assert time.monotonic() - started < 1.0
    finally:
        stop.set()
        for call in held:
            call.cancel()
        server.stop(0)
