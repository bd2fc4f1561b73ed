"""A slow disk: SSD reads capped at 0.15 GB/s (10x below the 1.5 GB/s the store assumes) for
the whole replay; loads take longer, answers stay the same."""
from bench.chaos.faults import BaseFault


class Fault(BaseFault):
    def setup(self, ctx) -> None:
        ctx.topo_kwargs["store_flags"] = ["--ssd-read-gbps-cap", "0.15", "--ssd-read-gbps", "0.15"]

    def inject(self, ctx) -> int:
        return 1
