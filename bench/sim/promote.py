"""bidaw-prefetch's predictive promotion in the timed simulator: SSD -> DRAM before the user
returns, from the eviction policy's own return-time prediction.

The pure parts are the live store's: `kv_store.eviction.prefetch_planner.PrefetchPlanner` picks
the evicted session expected back soonest (within the policy's horizon) and
`BidawPrefetchPolicy` says when each is expected back (`return_window`, taken at eviction),
whether its KV is worth the DRAM it would push out (`prefetch_allowed`) and takes it in without
counting an access (`admit_prefetched`). This file owns the I/O, as the store does:
- one promotion at a time, started only while no demand load is in flight (the queue's loads
  go first; a demand load that starts during a promotion pauses it: bench.sim.ssd) and no
  client's prepared read is queued or in flight (bench.sim.prepared), on the simulation's
  shared SSD bandwidth;
- a refusal (`prefetch_allowed` false) waits for the next arrival, as in the cache-only mode;
- a turn that arrives while its own KV is being promoted waits for that read (its request is
  queued LOADING) instead of starting a second one, unless the restore choice, given the read's
  remaining time, recomputes it;
- a KV larger than the whole DRAM is never promoted (it would be evicted as it lands);
- a promoted KV is not pinned: the policy ranks it (stale first if the user does not return by
  the high quantile), and the planner does not promote it again until the user returns.
Counts: `speculative_read_bytes` (promotions meant for a measured turn: the user's next turn is
in the window), `prefetches`, `prefetch_hits` (measured turns that hit KV promoted for them) and
`adopted` (measured turns that waited for a promotion in flight instead of a load of their own).
"""
from __future__ import annotations

from typing import Any

from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.prefetch_planner import PrefetchPlanner

PROMOTE = 3  # an event kind beside bench.sim.events' three: a candidate comes within the horizon


class Promoter:
    def __init__(self, sim: Any) -> None:
        policy = sim.store.dram.policy
        if not isinstance(policy, BidawPrefetchPolicy):
            raise ValueError(f"promotion needs the bidaw-prefetch eviction policy, not "
                             f"{type(policy).__name__}")
        self.sim, self.policy = sim, policy
        self.planner = PrefetchPlanner(policy.horizon_s)
        self.reading: int | None = None   # the user whose KV is being promoted
        self.nbytes = 0
        self.waiting: Any = None          # the queued turn that waits for that read, if any
        self.refused = False
        self.armed_at = float("inf")      # a PROMOTE event is pending at this time
        self.last_turn: dict[int, int] = {}  # user -> its latest turn (to attribute bytes)
        self.unused: set[int] = set()     # promoted, in DRAM, not hit yet
        self.counts = {"speculative_read_bytes": 0, "prefetches": 0, "prefetch_hits": 0,
                       "adopted": 0}
        sim.log.promotions = self.counts

    # ---- the policy's hooks ----------------------------------------------------------------
    def evicted(self, user: int, now: float) -> None:
        self.unused.discard(user)
        self.planner.evicted(user, self.policy.return_window(user), now,
                             self.policy.prefetch_cost(user))

    def left_s(self, now: float) -> float:
        """Seconds until the promotion in flight lands, if nothing else starts."""
        return self.sim.ssd.finish_estimates(now).get(("p", self.reading), 0.0)

    def arrived(self, job: Any) -> bool:
        """A turn of `job.user` arrives: no longer a candidate. True if its KV is being promoted
        now (the turn may then `wait_for` that read)."""
        user, measured = job.user, self.sim.w.measured[job.i]
        self.planner.returned(user)
        self.last_turn[user] = job.i
        self.refused = False
        if user in self.unused:
            self.unused.discard(user)
            self.counts["prefetch_hits"] += int(measured and user in self.sim.store.dram)
        return user == self.reading

    def wait_for(self, job: Any) -> None:
        """`job`'s turn waits for the promotion in flight (queued LOADING)."""
        self.waiting = job
        self.counts["adopted"] += int(self.sim.w.measured[job.i])
        self.sim.ssd.expedite(("p", self.reading), job.arrival)  # now a demand read: no pause
        self.sim.arm_ssd()

    def forget(self, user: int) -> None:
        self.planner.forget(user)
        self.unused.discard(user)

    # ---- the I/O ----------------------------------------------------------------------------
    def maybe_start(self, now: float) -> None:
        """Start the next promotion if the disk has no demand load, no client's prepared read
        (queued or in flight: a turn is known to come) and nothing is promoted."""
        sim = self.sim
        if self.reading is not None or sim.reads_in_flight or self.refused or (
                sim.prepared is not None and sim.prepared.busy):
            return
        store, dram = sim.store, sim.store.dram
        horizon = self.policy.prefetch_horizon(now)
        while (user := self.planner.next(now, horizon_s=horizon)) is not None:
            if user in store.ssd and user not in dram and user not in sim.queued:
                break
            self.planner.returned(user)  # back in DRAM or gone from the SSD: not a candidate
        if user is None:
            self._arm(self.planner.eligible_at(horizon), now)
            return
        size = store.ssd.size(user)
        need = dram.used + size - (dram.capacity - dram.watermark)
        if size > dram.capacity - dram.watermark:  # evicted as it lands, again and again
            self.planner.returned(user)
            return self.maybe_start(now)
        if need > 0 and not self.policy.prefetch_allowed(user, size, now, need, dram.size):
            self.refused = True
            return
        self.planner.promoted(user)
        self.reading, self.nbytes = user, store.read_from_ssd(user, now)
        i = self.last_turn.get(user, -1)
        j = sim.w.next_turn[i] if i >= 0 else -1
        if i >= 0 and sim.w.measured[j if j >= 0 else i]:
            self.counts["speculative_read_bytes"] += self.nbytes
            self.counts["prefetches"] += 1
        sim.ssd.start(("p", user), self.nbytes, now, background=True)
        sim.arm_ssd()

    def _arm(self, at: float | None, now: float) -> None:
        if at is not None and at < self.armed_at:
            self.armed_at = max(at, now)
            self.sim.events.push(self.armed_at, PROMOTE)

    def timer(self, now: float) -> None:
        """The PROMOTE event: a candidate may have come within the horizon."""
        if now >= self.armed_at:
            self.armed_at = float("inf")
        self.maybe_start(now)

    def finished(self, now: float) -> None:
        """The promotion's read landed: the KV enters DRAM, ranked by the policy without an
        access; a turn waiting for it is READY."""
        sim, user, job = self.sim, self.reading, self.waiting
        self.reading, self.waiting = None, None
        store = sim.store
        if user in store.ssd and user not in store.dram:
            self.policy.admit_prefetched(user, self.nbytes, now)
            store.dram.sizes[user] = self.nbytes  # the ledger's admit would count an access
            store.dram.used += self.nbytes
            if job is None:
                self.unused.add(user)
        if job is not None:
            sim.queue.load_finished(job.i)
