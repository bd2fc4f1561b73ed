"""Service crash under `bidaw up`: in a supervised deployment (services/launch/supervisor.py) the store,
the worker, the scheduler and the gateway are each killed with -9 mid-replay, and nobody restarts
them by hand. Each must come back by itself on its port, a turn through the OpenAI API must
succeed again, and after the store's crash reuse of KV (cached_tokens > 0) must return within
30 s, with the dead store's DRAM arena reclaimed."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import time
import urllib.request

from bench.chaos.faults import BaseFault
from services.client.chat_client import ChatClient, Conversation
from services.runtime.grpc_util import wait_healthy

ORDER = ("store", "worker", "scheduler", "gateway")
COME_BACK_S = 240.0  # a worker loads the model again
REUSE_S = 30.0  # after the store's kill
QUESTION = ("Please describe, in a few sentences, what the weather is usually like in Paris in "
            "spring and in autumn, for a visitor who has never been there.")


def _until(check, timeout: float) -> float | None:
    """Seconds until `check()` held (None: it never did within `timeout`)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if check():
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - the service is still coming back
            pass
        time.sleep(0.2)
    return None


class Fault(BaseFault):
    def setup(self, ctx) -> None:
        ctx.topo_kwargs["supervised"] = True
        self.checks: dict = {}

    def inject(self, ctx) -> int:
        dep = ctx.topo.deployment
        client = ChatClient(dep.scheduler_target, timeout=120)
        probe = Conversation(client, "service-crash-reuse")
        injected = 0
        for name in ORDER:
            if name == "store":  # a session whose KV is on SSD when the store dies
                probe.say(QUESTION, max_tokens=8)
                time.sleep(1.0)  # acknowledged, on its way to the SSD
            old = dict(dep.procs)[name].pid
            arenas = list((pathlib.Path(ctx.workdir) / "shm").glob(f"bidaw-store-{old}-*"))
            os.kill(old, signal.SIGKILL)
            killed = time.monotonic()
            injected += 1
            back = _until(lambda: dict(dep.procs)[name].pid != old and self._serving(dep, name),
                          COME_BACK_S)
            if back is None:
                ctx.fault_errors.append(f"{name} did not come back within {COME_BACK_S:.0f} s")
                return injected
            self.checks[f"{name}_back_s"] = round(back, 1)
            if name == "store":
                self._store_checks(ctx, client, probe, arenas, killed)
            if _until(lambda: self._turn(dep), 120.0) is None:
                ctx.fault_errors.append(f"no turn succeeded after the {name} restart")
        self.checks["restarts"] = dict(dep.supervisor.restarts)
        return injected

    def _store_checks(self, ctx, client, probe, arenas, killed: float) -> None:
        if any(a.exists() for a in arenas):
            ctx.fault_errors.append("the killed store's DRAM arena was not reclaimed")

        def reused() -> bool:
            reply = client.turn(probe.session_id, probe.messages + [
                {"role": "user", "content": "Thanks!"}], max_tokens=2)
            return reply.summary.cached_tokens > 0
        if _until(reused, max(REUSE_S - (time.monotonic() - killed), 1.0)) is None:
            ctx.fault_errors.append(f"no reuse within {REUSE_S:.0f} s of the store's crash")
        else:
            self.checks["store_reuse_s"] = round(time.monotonic() - killed, 1)

    @staticmethod
    def _serving(dep, name: str) -> bool:
        """The new process answers its own health check, and the gateway says all is well."""
        if name != "gateway":
            wait_healthy(getattr(dep, f"{name}_target"), 2.0)  # TimeoutError: not yet
        url = f"http://{dep.host}:{dep.gateway_port}/health"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status == 200

    @staticmethod
    def _turn(dep) -> bool:
        body = json.dumps({"model": dep.model, "max_tokens": 2,
                           "messages": [{"role": "user", "content": "Say hi."}]}).encode()
        request = urllib.request.Request(f"{dep.gateway_url}/chat/completions", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as reply:
            return json.loads(reply.read())["usage"]["completion_tokens"] >= 1
