"""The live scheduler's load-or-recompute choice (`--restore-choice on`): when the queue would
start the SSD load of a turn, wait for it (today's path), recompute the history, load a prefix
and recompute the rest, or (`--restore-suffix-loads`, the default) recompute the beginning while
the store reads the end, by the pure decision of scheduler/policy/restore_choice.py — the one
the timed simulator's bidaw-restore systems make (bench/sim/restore.py). The live reversed split
is the decision's unpiggybacked form: the beginning is a prefill of its own in the worker's
batch (spare_tokens_per_s = 0), started when the turn is dispatched.

What the decision is given, all durations from now:
- the KV: its tokens, bytes and the store's load estimate (`SessionLocation.load_estimate_s`, on
  the Awareness stream: its bytes at the store's measured SSD rate plus the loads queued ahead;
  the rate is taken as bytes / estimate, so the loads ahead count as part of its own read);
- the compute side: the prefill cost learned from finished turns (policy.PrefillRate, from
  TurnSummary: TTFT − queue − KV load per token computed), the turn's new tokens (its prompt's
  size less the stored history: `prompt_tokens` counts token ids, or characters / 4 for
  messages), W = one prefill step of that size per READY turn ahead (an estimate: the engine
  batches them), or, when the workers' slots are all taken, the wait for one to free if that is
  longer (policy.SlotWait: the service time learned from finished turns), the time left of the
  loads in flight (the store's estimates) and the turns running (the decode stall, weighed by
  `stall_weight`).
Until the rate is known (`PrefillRate.min_turns` finished turns) every turn waits for its load.
A turn is also asked when it arrives, with the loads waiting in the preparing queue added to its
own (they may go first: an upper bound), and recomputes at once when that is best; a turn whose
KV is being loaded already, against what is left of that load (the dispatcher asks).
"""
from __future__ import annotations

from dataclasses import dataclass

from services.runtime.gen import common_pb2, kv_store_pb2

from scheduler.policy import (RECOMPUTE, SPLIT_REVERSED, WAIT_FOR_LOAD, ComputeSide, KVOnSSD,
                              decide_restore)
from scheduler.policy.prefill_rate import PrefillRate
from scheduler.policy.slot_wait import SlotWait

CHARS_PER_TOKEN = 4  # a message's size in tokens, before the worker tokenizes it


def prompt_tokens(request: common_pb2.TurnRequest) -> int:
    """The size of a turn's prompt in tokens, as well as the scheduler can tell."""
    if request.prompt_token_ids:
        return len(request.prompt_token_ids)
    chars = len(request.raw_prompt) + sum(len(m.content) for m in request.messages)
    return chars // CHARS_PER_TOKEN


@dataclass(frozen=True)
class RestorePlan:
    """What the worker does instead of waiting for the load: reuse at most `max_tokens` stored
    tokens (0: recompute the history; k: a prefix, the store reading only it), or with
    `suffix_from` > 0 recompute the tokens before it while the store reads the rest."""
    max_tokens: int | None = None
    suffix_from: int = 0


class LiveRestoreChooser:
    def __init__(self, stall_weight: float = 0.3, rate: PrefillRate | None = None,
                 suffix_loads: bool = True) -> None:
        if not stall_weight >= 0:
            raise ValueError(f"--restore-stall-weight must be >= 0, got {stall_weight!r}")
        self.stall_weight = stall_weight
        self.suffix_loads = suffix_loads
        self.rate = rate or PrefillRate()
        self.slots = SlotWait()
        self.counts = {WAIT_FOR_LOAD: 0, RECOMPUTE: 0, "split": 0, SPLIT_REVERSED: 0}

    def observe(self, summary: common_pb2.TurnSummary) -> None:
        """A finished turn: its prefill time per token computed. A reversed split's is not
        one prefill (its beginning ran beside the read), so it teaches nothing. Every turn
        says how long it held its slot."""
        self.slots.observe(summary.latency_s - summary.queue_s)
        if summary.recomputed_tokens:
            return
        self.rate.observe(summary.prompt_tokens - summary.cached_tokens,
                          summary.ttft_s - summary.queue_s - summary.kv_load_s)

    def choose(self, loc: kv_store_pb2.SessionLocation | None, prompt: int, ready_ahead: int,
               loads_left_s: tuple[float, ...], running: int, backlog_s: float = 0.0,
               count: bool = True, slots: tuple[int, int] = (0, 0)) -> RestorePlan | None:
        """What the worker should do instead of waiting for the load (None: wait for it).
        `backlog_s`: disk time of loads not yet started that would go first (asked at
        arrival); `slots`: the workers' (free, total) slots ((0, 0): no slot wait counted)."""
        cost = self.rate.cost()
        if cost is None or loc is None or loc.tier != common_pb2.TIER_SSD \
                or loc.num_tokens < 1 or loc.num_bytes < 1 or not loc.load_estimate_s > 0:
            return None
        rate = loc.num_bytes / loc.load_estimate_s
        kv = KVOnSSD(loc.num_tokens, loc.num_bytes, loc.load_estimate_s + backlog_s, rate)
        new = max(prompt - loc.num_tokens, 1)
        w = max(ready_ahead * float(cost.step_s(new, 0, 0)),
                self.slots.wait_s(ready_ahead, *slots))
        compute = ComputeSide(cost, new, w, tuple(max(t, 0.0) for t in loads_left_s), running)
        best = decide_restore(kv, compute, suffix_loads=self.suffix_loads,
                              stall_weight=self.stall_weight).best
        name = best.name if best.name in (WAIT_FOR_LOAD, RECOMPUTE, SPLIT_REVERSED) else "split"
        if count or name == RECOMPUTE:
            self.counts[name] += 1
        if name == WAIT_FOR_LOAD:
            return None
        if name == SPLIT_REVERSED:
            return RestorePlan(suffix_from=best.k)
        return RestorePlan(max_tokens=0 if name == RECOMPUTE else best.k)

    def hand_over(self, loc: kv_store_pb2.SessionLocation, prompt: int, ready_ahead: int,
                  running: int, slots: tuple[int, int] = (0, 0)) -> RestorePlan | None:
        """A turn arriving while its prepared load, read end first (kv_store/end_first.py), has
        landed the tokens from `loc.landed_from_token` on: the choice for the tokens before
        them, as for KV on SSD whose load is what is left of this one (the timed simulator's
        hand-over, bench/sim/prepared.py). Wait (None), or read the landed end and recompute
        the beginning, all of it (the load stops) or its first k tokens while the load
        brings the rest. A prefix split is waiting: an end-first load lands its prefix last."""
        head = loc.landed_from_token
        if not 0 < head < loc.num_tokens:
            return None
        part = kv_store_pb2.SessionLocation(
            session_id=loc.session_id, tier=common_pb2.TIER_SSD, num_tokens=head,
            num_bytes=loc.num_bytes * head // loc.num_tokens,
            load_estimate_s=loc.load_estimate_s)
        plan = self.choose(part, prompt - (loc.num_tokens - head), ready_ahead, (), running,
                           slots=slots)
        if plan is None or plan.max_tokens:
            return None
        return RestorePlan(suffix_from=plan.suffix_from or head)

    def recompute_at_arrival(self, loc: kv_store_pb2.SessionLocation | None, prompt: int,
                             ready_ahead: int, backlog_s: float, running: int,
                             slots: tuple[int, int] = (0, 0)) -> bool:
        """Asked when a turn arrives with its KV on SSD, behind `backlog_s` of loads waiting in
        the preparing queue: True to recompute at once (else it is asked again when its load
        would start, the wait behind those loads then sunk)."""
        plan = self.choose(loc, prompt, ready_ahead, (), running, backlog_s, count=False,
                           slots=slots)
        return plan is not None and plan.max_tokens == 0

    def at_arrival(self, loc: kv_store_pb2.SessionLocation, prompt: int, ready_ahead: int,
                   waiting_bytes: int, running: int, slots: tuple[int, int] = (0, 0)
                   ) -> RestorePlan | None:
        """The choice for a turn arriving with its KV on SSD, behind `waiting_bytes` of loads
        waiting in the preparing queue; or being loaded already (a client's prepare, another
        turn's load), against what is left of that load, as the timed simulator asks it
        (bench/sim/restore.py), taking over the end it has landed if it reads end first.
        None: the turn waits for its load."""
        if not loc.load_estimate_s > 0:
            return None
        if loc.landed_from_token:
            return self.hand_over(loc, prompt, ready_ahead, running, slots)
        backlog_s = waiting_bytes * loc.load_estimate_s / max(loc.num_bytes, 1)
        if loc.tier == common_pb2.TIER_LOADING:  # read anyway: nothing waits behind it
            on_ssd = kv_store_pb2.SessionLocation()
            on_ssd.CopyFrom(loc)
            loc, on_ssd.tier, backlog_s = on_ssd, common_pb2.TIER_SSD, 0.0
        recompute = self.recompute_at_arrival(loc, prompt, ready_ahead, backlog_s, running, slots)
        return RestorePlan(max_tokens=0) if recompute else None
