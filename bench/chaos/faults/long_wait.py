"""A turn whose first token comes after ~9 minutes (BIDAW_CHAOS_WAIT_S, default 540 s): once
the replay is done the Ray engine actor is frozen (SIGSTOP), a turn is submitted, and the actor
thawed after the wait. Every hop (client -> scheduler -> worker) carries no data meanwhile, only
keepalive pings: the turn must be answered, with the tokens the same prompt gets without the
wait, the Awareness stream must stay up, and no service may log a GOAWAY."""
import os
import signal
import threading
import time

from bench.chaos.faults import BaseFault
from bench.chaos.procs import find_descendant
from services.chat_client import ChatClient

WAIT_ENV = "BIDAW_CHAOS_WAIT_S"
PROMPT = [{"role": "user", "content": "What is the capital of Italy?"}]


def wait_s() -> float:
    return float(os.environ.get(WAIT_ENV, "") or 540)


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        topo = ctx.topo
        self.problems: list[str] = []
        ctx.replay.join()  # the replay's own turns must not wait with it (their timeout: 120 s)
        pid = find_descendant(topo.services["worker0"].pid, "EngineHost")
        if not pid:
            self.problems.append("no Ray actor process found under the worker")
            return 0
        wait = wait_s()
        client = ChatClient(topo.scheduler_target, timeout=wait + 300)
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            outcome: dict = {}

            def submit():
                try:
                    outcome["answer"] = client.turn(
                        "long-wait", PROMPT, max_tokens=8,
                        on_text=lambda _: outcome.setdefault("first", time.monotonic()))
                except Exception as exc:  # noqa: BLE001 - reported below
                    outcome["error"] = exc

            turn = threading.Thread(target=submit)
            turn.start()
            # No calls of ours meanwhile: they would carry data on the connections (gRPC shares
            # one between channels to the same target) and hide a server that refuses pings.
            time.sleep(wait)
        finally:
            os.kill(pid, signal.SIGCONT)
        turn.join(300)
        if "error" in outcome or "answer" not in outcome:
            self.problems.append(f"the turn that waited {wait:.0f}s failed: "
                                 f"{outcome.get('error', 'no answer')}")
        else:
            answer = outcome["answer"]
            first = outcome.get("first", started) - started
            if first < wait * 0.9:
                self.problems.append(f"the first token came after {first:.1f}s, not after the "
                                     f"{wait:.0f}s wait")
            again = client.turn("long-wait-again", PROMPT, max_tokens=8)
            if again.token_ids != answer.token_ids:
                self.problems.append("the answer after the wait differs from the same prompt's")
        client.close()
        return 1

    def check(self, ctx) -> list[str]:
        for name, svc in ctx.topo.services.items():
            log = svc.log.read_text(errors="replace") if svc.log.exists() else ""
            if "too_many_pings" in log or "GOAWAY" in log:
                self.problems.append(f"{name} logged a GOAWAY")
            if name == "scheduler" and "awareness stream to" in log and " lost " in log:
                self.problems.append("the scheduler's Awareness stream to the store dropped")
        return self.problems
