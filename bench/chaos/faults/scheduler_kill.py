"""kill -9 of the scheduler mid-replay, restarted on the same port: clients retry the turns that
were cut, no session is corrupted."""
import time

from bench.chaos.faults import BaseFault


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        ctx.topo.kill9("scheduler")
        time.sleep(1.0)
        ctx.topo.restart("scheduler")
        return 1
