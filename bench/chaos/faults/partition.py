"""A network partition between the scheduler and the store: the scheduler reaches the store only
through a TCP proxy that is cut for 4 s mid-replay (connections closed, new ones refused) and
then healed. The Awareness stream must drop, reconnect and resynchronise from the snapshot."""
import time

import grpc

from bench.chaos.faults import BaseFault
from bench.chaos.proxy import CuttableProxy
from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel


class Fault(BaseFault):
    def setup(self, ctx) -> None:
        ctx.on_topology.append(self._proxy)

    def _proxy(self, ctx, topo) -> None:
        self.proxy = CuttableProxy(topo.store_target)
        topo.scheduler_store = self.proxy.address

    def _connected(self, ctx) -> bool | None:
        stub = scheduler_pb2_grpc.SchedulerStub(channel(ctx.topo.scheduler_target))
        try:
            return stub.Stats(scheduler_pb2.SchedulerStatsRequest(), timeout=5).awareness_connected
        except grpc.RpcError:
            return None

    def inject(self, ctx) -> int:
        self.proxy.cut()
        deadline = time.monotonic() + 4.0
        self.saw_down = False
        while time.monotonic() < deadline:
            self.saw_down |= self._connected(ctx) is False
            time.sleep(0.1)
        self.proxy.heal()
        return 1

    def check(self, ctx) -> list[str]:
        problems = [] if self.saw_down else ["the scheduler never noticed the partition"]
        deadline = time.monotonic() + 30
        while not self._connected(ctx):
            if time.monotonic() > deadline:
                return problems + ["the Awareness stream did not reconnect within 30 s"]
            time.sleep(0.2)
        return problems

    def teardown(self, ctx) -> None:
        self.proxy.close()
