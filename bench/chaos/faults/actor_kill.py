"""kill -9 of the Ray engine actor inside a compute worker mid-replay: Ray restarts the actor,
the scheduler re-runs the lost turns, the client sees every token once."""
import os
import signal
import time

from bench.chaos.faults import BaseFault
from bench.chaos.procs import find_descendant


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = find_descendant(ctx.topo.services["worker0"].pid, "EngineHost")
            if pid:
                os.kill(pid, signal.SIGKILL)
                return 1
            time.sleep(0.2)
        ctx.fault_errors.append("no Ray actor process found under the worker")
        return 0
