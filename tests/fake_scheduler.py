"""A Scheduler gRPC service without a model, for gateway tests: it answers by echoing, and the
last user message can ask it to fail in a chosen way ("!invalid", "!exhausted", "!unavailable",
"!midstream", "!block" waits until `release` is set)."""
from __future__ import annotations

import contextlib
import threading
import time

import grpc

from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import Server


class FakeScheduler(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self):
        self.requests: list[common_pb2.TurnRequest] = []
        self.stored: dict[str, int] = {}  # session -> tokens "stored" by its last turn
        self.release = threading.Event()
        self.blocked = 0
        self.cancelled = 0
        self._lock = threading.Lock()
        # What Stats answers (a test may break it: no worker, store disconnected ...).
        self.stats = scheduler_pb2.SchedulerStats(policy="fake", workers=1, stores=1,
                                                  awareness_connected=True)
        self.stats_calls = 0
        self.ended: list[str] = []  # EndSession calls, in order
        self.prepared: list[tuple[str, str]] = []  # PrepareSession calls: (tenant, session)
        self.warm: set[str] = set()  # sessions "promoted": a second prepare finds them in DRAM
        # every SubmitTurn, PrepareSession and EndSession as it arrived: (rpc, session,
        # time.monotonic()), in order
        self.calls: list[tuple[str, str, float]] = []
        self.prepare_delay_s = 0.0  # a slow store: PrepareSession answers this late
        self.prepare_error: grpc.StatusCode | None = None  # else PrepareSession fails so

    def SubmitTurn(self, request, context):
        with self._lock:
            self.requests.append(request)
            self.calls.append(("SubmitTurn", request.session_id, time.monotonic()))
        last = request.messages[-1].content if request.messages else request.raw_prompt
        if last == "!invalid":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "max_tokens 99999 exceeds the limit")
        if last == "!exhausted":
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "1024 turns queued")
        if last == "!unavailable":
            context.abort(grpc.StatusCode.UNAVAILABLE, "no worker")
        if last == "!unauthenticated":  # a gateway whose cluster token is not the deployment's
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "internal gRPC needs the token")
        if last == "!block":
            with self._lock:
                self.blocked += 1
            while not self.release.wait(0.05):
                if not context.is_active():  # the gateway cancelled the call
                    with self._lock:
                        self.cancelled += 1
                    return
        words = (["echo:"] + last.split())[:request.max_tokens or 16]
        prompt = sum(len(m.content.split()) + 1 for m in request.messages) or len(
            request.prompt_token_ids) or len(request.raw_prompt.split())
        for i, word in enumerate(words):
            yield common_pb2.TurnEvent(token_ids=[i], text=(" " if i else "") + word)
            if last == "!midstream":
                context.abort(grpc.StatusCode.INTERNAL, "worker crashed")
        cached = min(self.stored.get(request.session_id, 0), prompt - 1)
        self.stored[request.session_id] = prompt + len(words)
        yield common_pb2.TurnEvent(summary=common_pb2.TurnSummary(
            prompt_tokens=prompt, cached_tokens=cached, completion_tokens=len(words),
            kv_tier=common_pb2.TIER_DRAM if cached else common_pb2.TIER_NONE,
            finish_reason="length" if len(words) == request.max_tokens else "stop",
            ttft_s=0.01, latency_s=0.02, worker_id="fake"))

    def Stats(self, request, context):
        self.stats_calls += 1
        return self.stats

    def EndSession(self, request, context):
        with self._lock:
            self.ended.append(request.session_id)
            self.calls.append(("EndSession", request.session_id, time.monotonic()))
            return scheduler_pb2.EndSessionReply(
                known=self.stored.pop(request.session_id, None) is not None)

    def PrepareSession(self, request, context):
        """The first prepare of a stored session "starts a load" (LOADING), later ones find
        it in DRAM; an unknown one is not known."""
        with self._lock:
            self.prepared.append((request.tenant, request.session_id))
            self.calls.append(("PrepareSession", request.session_id, time.monotonic()))
        time.sleep(self.prepare_delay_s)
        if self.prepare_error is not None:
            context.abort(self.prepare_error, "the fake refuses prepares")
        with self._lock:
            if request.session_id not in self.stored:
                return scheduler_pb2.PrepareSessionReply(known=False)
            tier = common_pb2.TIER_DRAM if request.session_id in self.warm else \
                common_pb2.TIER_LOADING
            self.warm.add(request.session_id)
            return scheduler_pb2.PrepareSessionReply(known=True, tier=tier)


def start_fake_scheduler() -> tuple[Server, FakeScheduler]:
    fake = FakeScheduler()
    # token="": checks none, whatever this process's token is (clients in subprocesses have none)
    server = Server("127.0.0.1:0", [(scheduler_pb2_grpc.add_SchedulerServicer_to_server, fake)],
                    name="bidaw.v1.Scheduler", token="")
    return server, fake


def fake_on_a_port():
    """A fixture's body: a fake scheduler serving on a free port (`fake.port`), stopped after."""
    server, fake = start_fake_scheduler()
    fake.port = server.port
    yield fake
    server.stop(0)


@contextlib.contextmanager
def gateway_over_fake(api_keys: str):
    """A real gateway (`api_keys` as its flag takes them) in front of a fake scheduler:
    (the scheduler's server, the fake, the gateway)."""
    from services.gateway.config import GatewayConfig
    from tests.background_gateway import BackgroundGateway

    server, fake = start_fake_scheduler()
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           api_keys=api_keys, request_timeout_s=30)
    try:
        with BackgroundGateway(config) as gw:
            yield server, fake, gw
    finally:
        server.stop(0)
