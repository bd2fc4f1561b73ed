"""kill -9 of a compute worker process (and the Ray it started) mid-replay: its turns re-run on
the other worker, and the client sees no duplicated or different tokens."""
from bench.chaos.faults import BaseFault


class Fault(BaseFault):
    workers = 2

    def inject(self, ctx) -> int:
        ctx.topo.kill9("worker0", group=True)
        return 1
