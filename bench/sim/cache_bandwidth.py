"""Cache-only replay with SSD time (`--ssd-gbps G [--time-scale X]`).

The replay of bench/sim/cache.py, with one change: KV that is not in DRAM is read from SSD, and
a read takes time. Real time is trace time / X (X < 1: a slower pace), so a read of B bytes at
G GB/s (10^9 bytes/s) lasts B·X / (G·10^9) trace seconds; the policies keep the trace's clock.
- one queue of reads, one at a time, not preempted: demand reads first (FIFO), then clients'
  prepares, then promotions; so a demand read waits for at most the one read in flight; bytes
  are counted for reads begun inside the window;
- a policy with `observe_arrival` (bidaw-prefetch) hears every turn when it ARRIVES, before its
  KV is looked up, as the live store does (KVStoreCore.on_arrival): its return model learns the
  return then, not a queue wait later when a read completes;
- a turn is a hit only if its KV is in DRAM when it arrives; a miss queues a demand read (none if
  its KV is being read already) and the KV enters DRAM when the read completes (the policy then
  sees the access, at the turn's arrival time, and its answer), evicting as in the replay; with
  the end oracle a read for a session that has ended is still done but its KV freed at once;
  with `--end-known-after D` (a bound: how early ends must be known) the oracle announces each
  end D trace seconds after the last turn, when the next turn at or after then arrives;
- a client's prepare (`--prepare-lead-s R`: the user started typing, R real seconds before the
  turn, bench/sim/prepare_hints.py) queues a read of the session's KV if it is on SSD, for
  every policy, and is pinned in DRAM till its turn; a turn arriving before its read has begun
  makes it a demand read; bidaw-prefetch no longer guesses for a session whose client prepares;
- promotion (`bidaw-prefetch`): when the SSD is idle, the planner's candidate (an evicted session
  expected back within the horizon) is read if the policy lets it take DRAM; if not, the next,
  up to the policy's `prefetch_tries` refused, after which a refusal waits for the next turn;
- a policy with `observe_demand_read` hears each demand read's busy time when it completes (how
  full the disk is: bidaw-prefetch weighs hits per byte more, and its horizon shrinks).
"""
from __future__ import annotations

import math
from collections import deque

from bench.sim.cache import AccessLog
from bench.sim.prepare_hints import prepare_schedule
from bench.sim.ssd_reads import BandwidthResult, SsdRead
from kv_store.eviction.base import EvictionPolicy
from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.prefetch_planner import PrefetchPlanner

GB = 1e9


class _SsdReplay:
    """The replay's state: DRAM (the ledger), the SSD's read queue, the planner if any."""

    def __init__(self, log: AccessLog, policy: EvictionPolicy, dram_bytes: int, per_byte: float,
                 watermark: int, window: tuple[float, float], end_oracle: bool, lookahead: int,
                 end_delay: float = 0.0, prepare_lead: float | None = None,
                 prepare_share: float = 1.0):
        self.log, self.policy, self.per_byte = log, policy, per_byte
        self.start, self.end = window
        self.end_oracle, self.lookahead, self.end_delay = end_oracle, lookahead, end_delay
        self.ends_due: deque = deque()  # (when announced, key), in time order (end_delay > 0)
        self.dram = TierLedger(policy, dram_bytes, watermark)
        self.limit = dram_bytes - watermark
        self.planner = (PrefetchPlanner(policy.horizon_s)
                        if isinstance(policy, BidawPrefetchPolicy) else None)
        self.res = BandwidthResult()
        self.evicted: dict = {}      # key -> bytes on SSD (its next turn is a miss)
        self.stored: dict = {}       # key -> KV bytes its latest turn saved (prefetch only)
        self.ended: set = set()      # ended (end oracle) while a read for it was pending
        self.reads: dict = {}        # key -> its SsdRead, queued or in flight
        self.demand: deque = deque()  # demand reads not begun; then `prepared`'s
        self.busy: SsdRead | None = None
        self.free_at = float("-inf")  # when the SSD last became idle
        self.refused = False          # a promotion was refused: wait for the next turn
        self.unused: set = set()      # promoted, not hit yet
        self.prepares = ([] if prepare_lead is None else
                         prepare_schedule(log, prepare_lead, prepare_share))
        self.said = 0                 # prepares heard so far
        self.prepared: deque = deque()
        self.pinned: dict = {}        # key -> bytes in DRAM by a prepare, turn not here yet
        self.held: set = set()        # in DRAM when its prepare was said: not evicted till then
        self.clock = 0.0              # the time of the event being handled
        self.tries = getattr(policy, "prefetch_tries", 1)  # candidates weighed per idle disk
        self.demand_read = getattr(policy, "observe_demand_read", None)  # the disk's load

    # ---- DRAM -----------------------------------------------------------------------------
    def on_evict(self, k) -> None:
        self.unused.discard(k)
        if self.planner is None:
            self.evicted[k] = 0
        else:
            self.evicted[k] = self.stored[k]
            self.planner.evicted(k, self.policy.return_window(k), self.clock,
                                self.policy.prefetch_cost(k))

    def make_room(self, now: float) -> None:
        if self.dram.used > self.limit:
            self.dram.make_room(0, now, self.held, on_evict=self.on_evict)

    # ---- the SSD --------------------------------------------------------------------------
    def begin(self, r: SsdRead, at: float) -> None:
        r.start, r.done = at, at + r.size * self.per_byte
        self.busy = r
        if self.start <= at < self.end:
            self.res.count_read(r)

    def finish(self, r: SsdRead) -> None:
        k, t = r.key, r.done
        self.clock = t
        self.busy, self.free_at = None, t
        del self.reads[k]
        self.evicted.pop(k, None)
        if not r.speculative and self.demand_read is not None:
            self.demand_read(r.start, t)
        if k in self.ended:
            self.ended.discard(k)
            return
        if r.prepared and r.arrival is None:     # a client said it is coming: pinned till then
            self.pinned[k] = r.size
            self.dram.used += r.size
        elif r.arrival is None:                  # nobody asked yet: a promotion
            self.policy.admit_prefetched(k, r.size, t)
            self.dram.sizes[k] = r.size          # the ledger's admit would count an access
            self.dram.used += r.size
            self.unused.add(k)
        else:                                    # the turn that missed gets its access now
            self.dram.admit(k, r.size, r.arrival)
            self.policy.observe_answer(k, r.answer, r.arrival)
        self.make_room(t)

    def try_prefetch(self, at: float, horizon: float) -> bool:
        refused: set = set()
        while True:
            k = self.planner.next(at, refused, horizon)
            if k is None:
                self.refused = bool(refused)
                return False
            size = self.evicted[k]
            need = self.dram.used + size - self.limit
            if need <= 0 or self.policy.prefetch_allowed(k, size, at, need, self.dram.size):
                break
            refused.add(k)
            if len(refused) >= self.tries:
                self.refused = True
                return False
        self.planner.promoted(k)
        r = self.reads[k] = SsdRead(k, size, True)
        self.begin(r, at)
        return True

    def hear_prepares(self, now: float) -> None:
        """Each client's prepare said before `now`, at its time: a session on SSD is read next
        after the demand reads, one in DRAM stays there (the store pins both till the turn)."""
        while self.said < len(self.prepares) and self.prepares[self.said][0] < now:
            t, u, size = self.prepares[self.said]
            self.said += 1
            self.advance(t)
            if self.planner is not None:
                self.planner.announced(u)  # its client says when: no more guesses
            if u in self.dram.sizes:
                self.held.add(u)
            if u not in self.evicted or u in self.reads or u in self.pinned:
                continue
            self.prepared.append(r := SsdRead(u, size, prepared=True))
            self.reads[u] = r
            if self.busy is None:
                self.free_at = max(self.free_at, t)
                self.advance(t)

    def advance(self, t: float) -> None:
        """Run the SSD up to `t`: complete reads, start the next (demand first)."""
        while True:
            if self.busy is not None:
                if self.busy.done > t:
                    return
                self.finish(self.busy)
                continue
            if self.demand:
                self.begin(self.demand.popleft(), self.free_at)
                continue
            if self.prepared:
                self.begin(self.prepared.popleft(), self.free_at)
                continue
            if self.planner is None or self.refused:
                return
            horizon = self.policy.prefetch_horizon(t)  # one value: `e` is due at it
            e = self.planner.eligible_at(horizon)
            if e is None or e > t:
                return
            self.clock = max(self.free_at, e)
            if not self.try_prefetch(self.clock, horizon):
                return

    def announce_end(self, u) -> None:
        """The end oracle: `u` is over, its KV freed (a read of it in flight completes first)."""
        if u in self.reads:
            self.ended.add(u)
        self.dram.used -= self.pinned.pop(u, 0)
        self.held.discard(u)
        self.dram.remove(u)
        self.evicted.pop(u, None)
        if self.planner is not None:
            self.planner.forget(u)

    # ---- the turns ------------------------------------------------------------------------
    def run(self) -> BandwidthResult:
        log, policy, dram, res, planner = self.log, self.policy, self.dram, self.res, self.planner
        times, users, sizes, answers, nexts, lasts = (log.times, log.users, log.sizes,
                                                       log.answers, log.next_index, log.last)
        set_next_use = getattr(policy, "set_next_use", None)
        set_next_time = getattr(policy, "set_next_time", None)  # foresight-prefetch: a bound
        arrived = getattr(policy, "observe_arrival", None)
        resident, reads, n = dram.sizes, self.reads, len(times)
        i = 0
        for i in range(n):
            now = times[i]
            if now >= self.end:
                break
            self.hear_prepares(now)
            self.advance(now)
            while self.ends_due and self.ends_due[0][0] <= now:
                self.announce_end(self.ends_due.popleft()[1])
            self.clock, self.refused = now, False
            u, size, counted = users[i], sizes[i], now >= self.start
            if arrived is not None:  # the live store hears every arrival (store.on_arrival)
                arrived(u, now)
            if set_next_use is not None:
                set_next_use(u, nexts[i])
            if set_next_time is not None:
                set_next_time(u, times[nexts[i]] if nexts[i] < n else math.inf)
            if planner is not None:  # known once the turn is done: the next turn's history
                self.stored[u] = sizes[nexts[i]] if nexts[i] < n else size
                planner.returned(u)
            pending = reads.get(u)
            self.held.discard(u)
            if u in self.pinned:  # its prepare brought it in: a hit, and the pin ends
                dram.used -= self.pinned.pop(u)
                if counted:
                    res.count_hit(size, prepared=True)
                dram.admit(u, size, now)
                policy.observe_answer(u, answers[i], now)
            elif u in resident:
                if counted:
                    res.count_hit(size, prefetched=u in self.unused)
                self.unused.discard(u)
                dram.touch(u, now, size)
                policy.observe_answer(u, answers[i], now)
            elif pending is not None or u in self.evicted:
                if counted:
                    res.misses += 1
                    res.miss_bytes += size
                if pending is None:
                    pending = reads[u] = SsdRead(u, size)
                    self.demand.append(pending)
                elif pending.prepared and pending is not self.busy:  # a demand read now
                    self.prepared.remove(pending)
                    self.demand.append(pending)
                    pending.prepared = False
                pending.arrival, pending.answer = now, answers[i]
            else:
                if counted:
                    res.firsts += 1
                dram.admit(u, size, now)
                policy.observe_answer(u, answers[i], now)
            if self.end_oracle and lasts[i]:
                if self.end_delay > 0:
                    self.ends_due.append((now + self.end_delay, u))
                else:
                    self.announce_end(u)
            if dram.used > self.limit:
                policy.observe_queue(users[i + 1:i + 1 + self.lookahead], now)
                self.make_room(now)
            if self.busy is None:
                self.free_at = max(self.free_at, now)
                self.advance(now)
        res.evictions = dram.evictions
        res.accesses = i
        return res


def replay_bandwidth(log: AccessLog, policy: EvictionPolicy, dram_bytes: int, ssd_gbps: float,
                     time_scale: float = 1.0, watermark_bytes: int = 2 << 30,
                     window: tuple[float, float] | None = None, end_oracle: bool = True,
                     lookahead: int = 30, end_delay: float = 0.0,
                     prepare_lead_s: float | None = None,
                     prepare_share: float = 1.0) -> BandwidthResult:
    """Replay `log` through `policy` with DRAM of `dram_bytes` and an SSD of `ssd_gbps` GB/s at
    the trace's pace / `time_scale`; counts inside `window`; the end oracle, if on, announces
    each end `end_delay` trace seconds after the conversation's last turn; a client says each
    turn is coming `prepare_lead_s` real seconds before it arrives (None: no client does), the
    clients of `prepare_share` of the users."""
    if ssd_gbps <= 0 or time_scale <= 0:
        raise ValueError(f"--ssd-gbps and --time-scale must be > 0 (got {ssd_gbps}, {time_scale})")
    per_byte = time_scale / (ssd_gbps * GB)      # trace seconds per byte read
    win = window if window is not None else (float("-inf"), float("inf"))
    if end_delay < 0:
        raise ValueError(f"--end-known-after must be >= 0 seconds (got {end_delay})")
    lead = None if prepare_lead_s is None else prepare_lead_s * time_scale  # trace seconds
    return _SsdReplay(log, policy, dram_bytes, per_byte, watermark_bytes, win, end_oracle,
                      lookahead, end_delay, lead, prepare_share).run()
