"""The live scheduler's load-or-recompute choice (`--restore-choice on`): when the queue would
start the SSD load of a turn, wait for it (today's path), recompute the history, or load a prefix
and recompute the rest, by the pure decision of scheduler/policy/restore_choice.py — the one the
timed simulator's bidaw-restore systems make (bench/sim/restore.py).

What the decision is given, all durations from now:
- the KV: its tokens, bytes and the store's load estimate (`SessionLocation.load_estimate_s`, on
  the Awareness stream: its bytes at the store's measured SSD rate plus the loads queued ahead;
  the rate is taken as bytes / estimate, so the loads ahead count as part of its own read);
- the compute side: the prefill cost learned from finished turns (policy.PrefillRate, from
  TurnSummary: TTFT − queue − KV load per token computed), the turn's new tokens (its prompt's
  size less the stored history: `prompt_tokens` counts token ids, or characters / 4 for
  messages), W = one prefill step of that size per READY turn ahead (an estimate: the engine
  batches them), the time left of the loads in flight (the store's estimates) and the turns
  running (the decode stall, weighed by `stall_weight`).
Until the rate is known (`PrefillRate.min_turns` finished turns) every turn waits for its load.
A turn is also asked when it arrives, with the loads waiting in the preparing queue added to its
own (they may go first: an upper bound), and recomputes at once when that is best.
"""
from __future__ import annotations

from services.runtime.gen import common_pb2, kv_store_pb2

from scheduler.policy import RECOMPUTE, WAIT_FOR_LOAD, ComputeSide, KVOnSSD, decide_restore
from scheduler.policy.prefill_rate import PrefillRate

CHARS_PER_TOKEN = 4  # a message's size in tokens, before the worker tokenizes it


def prompt_tokens(request: common_pb2.TurnRequest) -> int:
    """The size of a turn's prompt in tokens, as well as the scheduler can tell."""
    if request.prompt_token_ids:
        return len(request.prompt_token_ids)
    chars = len(request.raw_prompt) + sum(len(m.content) for m in request.messages)
    return chars // CHARS_PER_TOKEN


class LiveRestoreChooser:
    def __init__(self, stall_weight: float = 0.3, rate: PrefillRate | None = None) -> None:
        if not stall_weight >= 0:
            raise ValueError(f"--restore-stall-weight must be >= 0, got {stall_weight!r}")
        self.stall_weight = stall_weight
        self.rate = rate or PrefillRate()
        self.counts = {WAIT_FOR_LOAD: 0, RECOMPUTE: 0, "split": 0}

    def observe(self, summary: common_pb2.TurnSummary) -> None:
        """A finished turn: its prefill time per token computed."""
        self.rate.observe(summary.prompt_tokens - summary.cached_tokens,
                          summary.ttft_s - summary.queue_s - summary.kv_load_s)

    def choose(self, loc: kv_store_pb2.SessionLocation | None, prompt: int, ready_ahead: int,
               loads_left_s: tuple[float, ...], running: int, backlog_s: float = 0.0,
               count: bool = True) -> int | None:
        """Stored tokens the worker should reuse: None (all: wait for the load), 0 (recompute)
        or k (a prefix; the store reads only it). `backlog_s`: disk time of loads not yet
        started that would go first (asked at arrival)."""
        cost = self.rate.cost()
        if cost is None or loc is None or loc.tier != common_pb2.TIER_SSD \
                or loc.num_tokens < 1 or loc.num_bytes < 1 or not loc.load_estimate_s > 0:
            return None
        rate = loc.num_bytes / loc.load_estimate_s
        kv = KVOnSSD(loc.num_tokens, loc.num_bytes, loc.load_estimate_s + backlog_s, rate)
        new = max(prompt - loc.num_tokens, 1)
        compute = ComputeSide(cost, new, ready_ahead * float(cost.step_s(new, 0, 0)),
                              tuple(max(t, 0.0) for t in loads_left_s), running)
        best = decide_restore(kv, compute, stall_weight=self.stall_weight).best
        name = "split" if best.name not in (WAIT_FOR_LOAD, RECOMPUTE) else best.name
        if count or name == RECOMPUTE:
            self.counts[name] += 1
        return None if name == WAIT_FOR_LOAD else 0 if name == RECOMPUTE else best.k

    def recompute_at_arrival(self, loc: kv_store_pb2.SessionLocation | None, prompt: int,
                             ready_ahead: int, backlog_s: float, running: int) -> bool:
        """Asked when a turn arrives with its KV on SSD, behind `backlog_s` of loads waiting in
        the preparing queue: True to recompute at once (else it is asked again when its load
        would start, the wait behind those loads then sunk)."""
        return self.choose(loc, prompt, ready_ahead, (), running, backlog_s, count=False) == 0
