"""bidaw-restore's per-turn choice in the timed simulator: when the queue starts the SSD load of a
turn, load it, recompute the history, or load a prefix and recompute the rest, by
scheduler.policy.restore_choice (the pure decision), fed from the simulation's state.

What the decision is given, at the instant the load would start (durations from now):
- A, the disk backlog: the SSD model's own estimate for this read under equal sharing with the
  transfers in flight (demand reads and write-backs), `SharedBandwidth.load_estimate`.
- W, when the GPU could start this turn: the end of the GPU step in progress plus, for each
  READY turn ahead of it in arrival order, one prefill step of its own (an estimate: the engine
  batches them, sharing one step overhead, and a full batch would decode first).
- ahead_ready_s: when each turn ahead whose read is in flight lands (the SSD model's estimate).
Turns ahead are looked for among the first `AHEAD` queued; beyond them W is cut short.

`stall_weight` λ (bidaw-restore-stall): the decision weighs in the stall its prefill steps impose
on the running batch's decodes (`decide_restore(..., stall_weight=λ)` with `running` = the turns
decoding now), so the live scheduler and the simulator make one decision.

Options applied: WAIT_FOR_LOAD reads the whole KV (today's path); RECOMPUTE reads nothing and
makes the turn READY at once, as a KV lost from the SSD does (the prefill recomputes the
history, its KV not being in DRAM); SPLIT at k reads k tokens' share of the bytes and the prefill
computes the other n − k with k tokens restored; the partial KV is not admitted to DRAM (the full
one enters at write-back). SPLIT_REVERSED needs a suffix read the store lacks: not offered.
"""
from __future__ import annotations

from typing import Any

from bench.sim.tiers import DRAM
from scheduler.policy import (KV_NONE, LOADING, READY, RECOMPUTE, SPLIT, WAIT_FOR_LOAD,
                              ComputeSide, KVOnSSD, QueuedRequest, decide_restore)

AHEAD = 256  # queued turns looked at for those ahead (beyond them W is underestimated)
CHOICE_NAMES = {WAIT_FOR_LOAD: "wait", RECOMPUTE: "recompute", SPLIT: "split"}


class RestoreChooser:
    """Chooses for one TimedSimulation (`sim`, read only) and counts the measured turns' choices
    in `counts` (the TurnLog's `restore_choices`)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.step = sim.cost.prefill_cost(sim.tensor)
        self.counts = {name: 0 for name in CHOICE_NAMES.values()}
        sim.log.restore_choices = self.counts  # reported in the system's summary

    def choose(self, req: QueuedRequest, job: Any, now: float) -> int:
        """History tokens to load (job.hist: all, 0: recompute); sets job.split_k for SPLIT."""
        sim = self.sim
        n = job.hist
        kv = KVOnSSD(n, req.kv_bytes, sim.ssd.load_estimate(req.kv_bytes, now),
                     sim.cost.ssd_bytes_per_s)
        slot_free, ahead_ready = self._ahead(req, now)
        compute = ComputeSide(self.step, int(sim.w.query[job.i]), slot_free, ahead_ready,
                              running=len(sim.running))
        best = decide_restore(kv, compute, stall_weight=sim.spec.stall_weight).best
        k = {WAIT_FOR_LOAD: n, RECOMPUTE: 0}.get(best.name, best.k)
        job.split_k = k if 0 < k < n else 0
        if sim.w.measured[job.i]:
            self.counts[CHOICE_NAMES[best.name]] += 1
        return k

    def _ahead(self, req: QueuedRequest, now: float) -> tuple[float, tuple[float, ...]]:
        """W and the landing times of the reads in flight of the turns ahead of `req`."""
        sim = self.sim
        slot_free = max(sim.gpu_free_at - now, 0.0) if sim.gpu_busy else 0.0
        lands = sim.ssd.finish_estimates(now)
        ready: list[float] = []
        for user in sim.queue.upcoming(AHEAD):
            job = sim.queued[user]
            other = sim.queue.get(job.i)
            if other is req:
                break
            if other.state == READY:
                slot_free += float(self._prefill_s(other, job))
            elif other.state == LOADING and job.i in lands:
                ready.append(lands[job.i])
        return slot_free, tuple(ready)

    def _prefill_s(self, req: QueuedRequest, job: Any) -> float:
        """One prefill step of a READY turn alone, as the engine will size it."""
        sim = self.sim
        cached = req.kv_location != KV_NONE and sim.store.location(job.user) == DRAM
        restored = job.hist if cached else job.split_k
        return self.step.step_s(sim.w.query[job.i] + job.hist - restored, restored, restored)
