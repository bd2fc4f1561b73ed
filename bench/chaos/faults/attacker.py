"""An attacker who reaches the internal gRPC ports calls every method of every service (store,
scheduler, each worker) mid-replay, without the cluster token and with a guessed one, aimed at a
victim session and the real members (bench/chaos/attacker.py). Every call must be refused with
UNAUTHENTICATED, and nothing may change: membership, the victim's stored KV."""
import time

from bench.chaos.attacker import attack, refused, snapshot
from bench.chaos.faults import BaseFault
from services.client.chat_client import ChatClient

VICTIM = "attacker-victim"
# Not the tier: the replay goes on during the attack, and eviction may move the victim to SSD.
UNCHANGED = ("workers", "stores", "kv_tokens", "kv_sha256")


class Fault(BaseFault):
    def inject(self, ctx) -> int:
        topo = ctx.topo
        client = ChatClient(topo.scheduler_target, timeout=120)
        client.turn(VICTIM, [{"role": "user", "content": "Name three rivers."}], max_tokens=8)
        client.close()
        view = lambda: {k: v for k, v in snapshot(  # noqa: E731
            topo.scheduler_target, topo.store_target, VICTIM).items() if k in UNCHANGED}
        before = view()
        targets = {"scheduler": topo.scheduler_target, "store": topo.store_target}
        workers = [s.target for n, s in topo.services.items() if n.startswith("worker")]
        self.results = {}
        for i, worker in enumerate(workers):
            found = attack({**targets, "worker": worker}, VICTIM, worker)
            self.results.update({f"{k} @{'w%d' % i}": v for k, v in found.items()})
        time.sleep(3)  # past 3 heartbeats (0.5 s here): a fake member would have shown
        after = view()
        self.changed = [f"{k}: {before[k]!r} -> {after[k]!r}" for k in UNCHANGED
                        if before[k] != after[k]]
        self.checks = {"calls_attempted": len(self.results),
                       "calls_refused": len(self.results) - len(refused(self.results))}
        return 1

    def check(self, ctx) -> list[str]:
        problems = [f"not refused: {p}" for p in refused(self.results)]
        problems += [f"the attack changed {c}" for c in self.changed]
        if not self.results:
            problems.append("no call was attempted")
        return problems
