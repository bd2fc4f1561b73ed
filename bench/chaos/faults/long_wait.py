"""A turn whose first token comes after ~9 minutes (BIDAW_CHAOS_WAIT_S, default 540 s). Once
the replay is done the worker is restarted as a slow engine (`--min-step-ms`: every step takes
at least wait/16) that prefills 32 prompt tokens a step, and given a 512-token prompt: its 16
prefill chunks take the whole wait before the first token (the step floor makes the wait, not
the model: an 8,000-token prompt in 512-token chunks did the same in 10x the compute).
Every hop (client -> scheduler -> worker, scheduler -> store's Awareness stream) carries no
data meanwhile, only keepalive pings. The turn must be answered, equal token for token to the
in-process recompute (it joins the replay's answers for the runner's check), no service may
log a GOAWAY, and the Awareness stream may not drop."""
import os
import time

import grpc

from bench.chaos.conversations import Answered
from bench.chaos.faults import BaseFault
from services.runtime.gen import common_pb2, scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel

WAIT_ENV = "BIDAW_CHAOS_WAIT_S"
CHUNKS, CHUNK_TOKENS = 16, 32
PROMPT = [100 + (i * 7919) % 20000 for i in range(CHUNKS * CHUNK_TOKENS)]


def wait_s() -> float:
    return float(os.environ.get(WAIT_ENV, "") or 540)


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        topo = ctx.topo
        self.problems: list[str] = []
        ctx.replay.join()  # the replay's own turns must not crawl with it (timeout 120 s)
        wait = wait_s()
        worker = topo.services["worker0"]
        topo.kill9("worker0")
        worker.args = [*worker.args, "--min-step-ms", str(int(wait * 1000 / CHUNKS)),
                       "--prefill-chunk-tokens", str(CHUNK_TOKENS)]
        topo.restart("worker0")
        stats = scheduler_pb2_grpc.SchedulerStub(channel(topo.scheduler_target))
        deadline = time.monotonic() + 60
        while stats.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=10).workers < 1:
            if time.monotonic() > deadline:
                self.problems.append("the restarted worker never rejoined")
                return 0
            time.sleep(0.5)
        # From here on no calls of ours until the answer: they would carry data on the shared
        # connections (gRPC shares one between channels to a target) and hide refused pings.
        turn = common_pb2.TurnRequest(session_id="long-wait", prompt_token_ids=PROMPT,
                                      max_tokens=2, ignore_eos=True)
        tokens: list[int] = []
        first = cached = 0.0
        started = time.monotonic()
        try:
            with channel(topo.scheduler_target) as ch:
                for event in scheduler_pb2_grpc.SchedulerStub(ch).SubmitTurn(
                        turn, timeout=wait + 600):
                    if event.token_ids and not tokens:
                        first = time.monotonic()
                    tokens.extend(event.token_ids)
                    cached = event.summary.cached_tokens if event.HasField("summary") else cached
        except grpc.RpcError as exc:  # the fault's finding
            self.problems.append(f"the turn that waited {wait:.0f}s failed: "
                                 f"{exc.code().name}: {exc.details()}")
            return 1
        took = (first or time.monotonic()) - started
        if took < wait * 0.9:
            self.problems.append(f"the first token came after {took:.0f}s, not after the "
                                 f"{wait:.0f}s wait")
        self.checks = {"first_token_s": round(took, 1), "wait_s": wait}
        with ctx.replay.log.lock:  # the runner compares it with the recompute
            ctx.replay.log.answered.append(Answered("long-wait", PROMPT, tokens, 2, 1,
                                                    int(cached)))
        return 1

    def check(self, ctx) -> list[str]:
        for name, svc in ctx.topo.services.items():
            log = svc.log.read_text(errors="replace") if svc.log.exists() else ""
            if "too_many_pings" in log or "GOAWAY" in log:
                self.problems.append(f"{name} logged a GOAWAY")
            if name == "scheduler" and "awareness stream to" in log and " lost " in log:
                self.problems.append("the scheduler's Awareness stream to the store dropped")
        return self.problems
