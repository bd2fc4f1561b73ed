"""The reversed split in the timed simulator (`suffix_loads`): a history's beginning recomputed
on the GPU while the SSD reads its end. Causal attention lets the beginning run with no KV at
all, so it is a GPU "piece" of its own, due from the moment the end's read starts:
- batched with the prefills, after the READY turns; or, with `piggyback` while turns are
  decoding, carried by the decode steps in the compute their memory-bound steps leave idle, one
  step at a time, never lengthening one;
- once the end lands, what is left of the beginning is computed in the turn's own prefill step
  with its new tokens (the engine's batch then counts it).
A job's `piece`: 0 none, 1 due, 2 on the GPU, 3 done or left to its own step.
"""
from __future__ import annotations

from typing import Any

from bench.sim.events import GPU_DONE
from bench.sim.job import Job


class Beginnings:
    def __init__(self, sim: Any) -> None:
        self.sim = sim
        self.due: list[Job] = []  # beginnings to compute, first come first

    def __bool__(self) -> bool:
        return bool(self.due)

    def load_started(self, job: Job) -> None:
        job.piece = 1
        self.due.append(job)

    def landed(self, job: Job) -> bool:
        """The end's read is done: whether the turn is READY now (else when its piece ends)."""
        if job.piece == 2:
            return False  # on the GPU now: READY when that step ends
        if job.piece == 1:  # the rest goes into its own prefill step
            self.due.remove(job)
            job.piece = 3
        return True

    def batch(self, batch: list[Job], used: int, tokens: int) -> None:
        """Add due beginnings to a prefill batch, within its GPU memory and token budgets."""
        sim, cost = self.sim, self.sim.cost
        while (self.due and len(sim.running) + len(batch) < cost.max_batch
               and not (sim.spec.piggyback and sim.running)):  # else on the decode steps
            job = self.due[0]
            gpu_bytes = self.sim.gpu_kv_bytes(job)
            extra = 0 if job.gpu_held else gpu_bytes
            left = job.rev_k - job.piece_done
            if (batch or sim.running) and (used + extra > cost.gpu_kv_bytes or (
                    batch and tokens + left > cost.max_prefill_tokens)):
                break
            self.due.pop(0)
            job.piece, job.gpu_bytes = 2, gpu_bytes
            job.new_tokens, job.ctx, job.pcie_bytes, job.restore_tokens = left, job.piece_done, 0, 0
            used, tokens = used + extra, tokens + left
            batch.append(job)

    def ride(self, now: float) -> bool:
        """Start one decode step carrying as much of the first due beginning as it computes for
        free (False if none: a compute-bound step; the beginning then waits for its end)."""
        sim, cost, job = self.sim, self.sim.cost, self.due[0]
        n, done = len(sim.running), job.piece_done
        c = min(cost.free_prefill_tokens(n, sim.ctx_sum, done), job.rev_k - done)
        if c <= 0:
            return False
        self.due.pop(0)
        job.piece = 2
        if not job.gpu_held:
            job.gpu_bytes = self.sim.gpu_kv_bytes(job)
            sim.gpu_used += job.gpu_bytes
            job.gpu_held = True
        t = now + cost.decode_step_time(n, sim.ctx_sum, cost.prefill_flops(c, done))
        sim.gpu_busy, sim.gpu_free_at = True, t
        sim.events.push(t, GPU_DONE, (job, c))
        return True

    def computed(self, job: Job, tokens: int) -> None:
        """`tokens` more of `job`'s beginning computed; READY if its end has landed."""
        job.piece_done += tokens
        if job.landed or job.piece_done >= job.rev_k:
            job.piece = 3
            if job.landed:
                self.sim.queue.load_finished(job.i)
        else:
            job.piece = 1
            self.due.insert(0, job)
