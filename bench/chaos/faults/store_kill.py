"""kill -9 of the KV store mid-replay, restarted on the same port and data directory: the index
is rebuilt from the SSD files, sessions continue, acknowledged KV is intact."""
import time

from bench.chaos.faults import BaseFault
from bench.chaos.probes import stored_tokens


class Fault(BaseFault):
    ssd_snapshot = True

    def inject(self, ctx) -> int:
        ctx.before = stored_tokens(ctx.topo.store_target, ctx.sessions())
        ctx.topo.kill9("store")
        time.sleep(1.0)
        ctx.topo.restart("store")
        return 1
