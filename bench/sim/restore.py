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

`choose_at_arrival` (bidaw-prefetch): a turn that arrives with its KV on SSD is also asked at
once, with the disk backlog it joins as A (the SSD model's estimate for its read behind the
transfers in flight and every load still waiting in the preparing queue, whichever order HRRN
gives them: an upper bound); if recomputing is its best option it is queued READY at once (as a
KV lost from the SSD), else it waits in the preparing queue and is asked again when its load
would start. The load-start decision alone sees only the transfers in flight, once the wait in
the preparing queue is sunk.

Options applied: WAIT_FOR_LOAD reads the whole KV (today's path); RECOMPUTE reads nothing and
makes the turn READY at once, as a KV lost from the SSD does (the prefill recomputes the
history, its KV not being in DRAM); SPLIT at k reads k tokens' share of the bytes and the prefill
computes the other n − k with k tokens restored; the partial KV is not admitted to DRAM (the full
one enters at write-back). SPLIT_REVERSED at k (`suffix_loads`, bidaw-prefetch) reads the
last n − k tokens' share of the bytes while the engine recomputes the first k as a GPU piece of
their own (bench.sim.engine); the turn is READY when both are done. The live store reads a
history's end too (`ReadKVRequest.start_token`) and the live scheduler offers this split
(scheduler/restore_chooser.py), without the piggyback: there the beginning is a prefill of its own.
Due pieces count in W (they take the GPU's next prefill step, after the READY turns), unless
they ride on the decode steps (`piggyback`, turns running): the decision is then given σ, the
tokens per second the running batch's decode step computes for free (CostModel's
`free_prefill_tokens` over its step time, for the batch as it is now), and P, the due pieces'
tokens left, which take that spare compute first.
"""
from __future__ import annotations

from typing import Any

from bench.sim.tiers import DRAM
from scheduler.policy import (KV_LOADING, KV_NONE, KV_SSD, LOADING, READY, RECOMPUTE, SPLIT,
                              SPLIT_REVERSED, WAIT_FOR_LOAD, WAITING, ComputeSide, KVOnSSD, QueuedRequest,
                              decide_restore)

AHEAD = 256  # queued turns looked at for those ahead (beyond them W is underestimated)
CHOICE_NAMES = {WAIT_FOR_LOAD: "wait", RECOMPUTE: "recompute", SPLIT: "split",
                SPLIT_REVERSED: "reversed"}


def where_on_arrival(sim: Any, job: Any, reader: Any, now: float) -> str:
    """Where a turn arriving with its KV on SSD is queued: KV_SSD (its load is decided when it
    would start), KV_LOADING (`reader`, not None: it waits for the read of its KV in flight, a
    promotion or a client's prepared read) or KV_NONE (`choose_at_arrival`: recomputed at once,
    as if its KV were lost). A prepared read in flight with `suffix_loads` is taken over
    (bench.sim.prepared's `hand_over`: KV_DRAM when only a beginning is left to recompute)."""
    if reader is not None and reader is sim.prepared and sim.spec.suffix_loads and sim.chooser:
        return reader.hand_over(job, now)  # its landed end kept; the choice is for the rest
    if sim.spec.choose_at_arrival and sim.chooser.recompute_at_arrival(
            job, sim.store.size(job.user), now, reader.left_s(now) if reader else None):
        return KV_NONE
    if reader is not None:
        reader.wait_for(job)
        return KV_LOADING
    return KV_SSD


class RestoreChooser:
    """Chooses for one TimedSimulation (`sim`, read only) and counts the measured turns' choices
    in `counts` (the TurnLog's `restore_choices`)."""

    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.step = sim.cost.prefill_cost(sim.tensor)
        self.suffix = sim.spec.suffix_loads
        self.counts = {name: 0 for o, name in CHOICE_NAMES.items()
                       if self.suffix or o != SPLIT_REVERSED}
        sim.log.restore_choices = self.counts  # reported in the system's summary

    def choose(self, req: QueuedRequest, job: Any, now: float) -> int:
        """History tokens to load (job.hist: all, 0: recompute); sets job.split_k for SPLIT."""
        sim = self.sim
        n = job.hist
        slot_free, ahead_ready, behind = self._ahead(req, now)
        kv = KVOnSSD(n, req.kv_bytes, sim.ssd.load_estimate(req.kv_bytes, now),
                     sim.cost.ssd_bytes_per_s, loads_behind=behind)
        compute = self._compute(job, slot_free, ahead_ready)
        best = self._decide(kv, compute)
        if best.name == SPLIT_REVERSED:  # best.k: the beginning recomputed
            job.rev_k, k = best.k, n - best.k
        else:
            k = {WAIT_FOR_LOAD: n, RECOMPUTE: 0}.get(best.name, best.k)
            job.split_k = k if 0 < k < n else 0
        self.count(job, best.name)
        return k

    def recompute_at_arrival(self, job: Any, kv_bytes: int, now: float,
                             load_s: float | None = None) -> bool:
        """`choose_at_arrival`: whether the arriving `job` (KV on SSD, `kv_bytes`) should skip
        the preparing queue and recompute (counted as a recompute). `load_s`: when its KV lands
        (a promotion in flight), else the backlog's estimate."""
        if self.best_at_arrival(job, job.hist, kv_bytes, now, load_s).name != RECOMPUTE:
            return False
        self.count(job, RECOMPUTE)
        return True

    def best_at_arrival(self, job: Any, tokens: int, kv_bytes: int, now: float,
                        load_s: float | None = None):
        """The best option for the arriving `job` whose history's first `tokens` (`kv_bytes`)
        are on SSD, every READY turn queued ahead of it; `load_s` as for recompute_at_arrival."""
        sim = self.sim
        waiting = [r.kv_bytes for r in (sim.queue.get(sim.queued[u].i)
                                        for u in sim.queue.upcoming(AHEAD)) if r.state == WAITING]
        # as many loads as wait now will wait behind this one when it starts (a stationary queue:
        # those arriving during its wait); none behind a read in flight, read anyway
        behind = len(waiting) * sim.spec.disk_behind if load_s is None else 0
        if load_s is None:
            load_s = sim.ssd.load_estimate(kv_bytes, now) + sum(waiting) / sim.cost.ssd_bytes_per_s
        kv = KVOnSSD(tokens, kv_bytes, load_s, sim.cost.ssd_bytes_per_s, loads_behind=behind)
        slot_free = self._gpu_free(now)
        for user in sim.queue.upcoming(AHEAD):  # every READY turn queued is ahead of this one
            other = sim.queued[user]
            req = sim.queue.get(other.i)
            if req.state == READY:
                slot_free += float(self._prefill_s(req, other))
        return self._decide(kv, self._compute(job, slot_free))

    def count(self, job: Any, option: int) -> None:
        if self.sim.w.measured[job.i]:
            self.counts[CHOICE_NAMES[option]] += 1

    def _ahead(self, req: QueuedRequest, now: float) -> tuple[float, tuple[float, ...], int]:
        """W, the landing times of the reads in flight of the turns ahead of `req`, and the
        loads still waiting for the disk (behind `req`'s, which starts now)."""
        sim = self.sim
        slot_free = self._gpu_free(now)
        lands = sim.ssd.finish_estimates(now)
        ready: list[float] = []
        behind, before = 0, True
        for user in sim.queue.upcoming(AHEAD):
            job = sim.queued[user]
            other = sim.queue.get(job.i)
            if other is req:
                before = False
            elif other.state == WAITING:
                behind += sim.spec.disk_behind
            elif not before:
                continue
            elif other.state == READY:
                slot_free += float(self._prefill_s(other, job))
            elif other.state == LOADING and job.i in lands:
                ready.append(lands[job.i])
        return slot_free, tuple(ready), behind

    def _decide(self, kv: KVOnSSD, compute: ComputeSide):
        return decide_restore(kv, compute, suffix_loads=self.suffix,
                              stall_weight=self.sim.spec.stall_weight).best

    def _riding(self) -> bool:
        """Whether due pieces ride on the decode steps now (rather than take prefill steps)."""
        return self.sim.spec.piggyback and bool(self.sim.running)

    def _compute(self, job: Any, slot_free: float, ahead_ready: tuple = ()) -> ComputeSide:
        sim, spare, taken = self.sim, 0.0, 0.0
        if self._riding():
            n, ctx = len(sim.running), sim.ctx_sum
            spare = sim.cost.free_prefill_tokens(n, ctx) / sim.cost.decode_step_time(n, ctx)
            taken = float(sum(j.rev_k - j.piece_done for j in sim.beginnings.due))
        return ComputeSide(self.step, int(sim.w.query[job.i]), slot_free, ahead_ready,
                           running=len(sim.running), spare_tokens_per_s=spare,
                           spare_taken_tokens=taken)

    def _gpu_free(self, now: float) -> float:
        """When the GPU step in progress and the due reversed splits' pieces are done."""
        sim = self.sim
        free = max(sim.gpu_free_at - now, 0.0) if sim.gpu_busy else 0.0
        if self._riding():
            return free
        return free + sum(float(self.step.step_s(j.rev_k - j.piece_done, j.piece_done, 0))
                          for j in sim.beginnings.due)

    def _prefill_s(self, req: QueuedRequest, job: Any) -> float:
        """One prefill step of a READY turn alone, as the engine will size it."""
        sim = self.sim
        if job.piece == 3:  # a reversed split: the new tokens on the whole history, and what
            q, n, f = sim.w.query[job.i], job.hist, job.piece_done  # is left of its beginning
            r = job.rev_k - f
            pairs = r * f + r * (r + 1) / 2 + q * n + q * (q + 1) / 2
            return self.step.pairs_step_s(q + r, pairs, n - job.rev_k)
        cached = req.kv_location != KV_NONE and sim.store.location(job.user) == DRAM
        restored = job.hist if cached else job.split_k
        return self.step.step_s(sim.w.query[job.i] + job.hist - restored, restored, restored)
