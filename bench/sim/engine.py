"""The timed discrete-event simulation of one system on one workload.

Resources: one GPU running an iteration-level batch engine (vLLM-style: a step either prefills
newly dispatched requests — prefill first — or decodes one token for every running request), an
SSD whose bandwidth the loads in flight share, and the DRAM/SSD tiers (bench.sim.tiers). The
scheduling queue (scheduler.policy) decides which load starts and who is dispatched; the
eviction policy (kv_store.eviction) decides what leaves DRAM. Consecutive decode steps are fused
into one event up to the first step that ends after the next pending event or finishes a
request, which is exact at step granularity: nothing could have changed the batch earlier.
A turn's arrival: bench.sim.arrival. Per system: load, recompute or split a KV on SSD
(bench.sim.restore; a reversed split's recomputed beginning: .beginnings); promote it (.promote);
read it when a client says its user is typing (.prepared).
"""
from __future__ import annotations

from typing import Any, Callable

from bench.sim.arrival import arrive
from bench.sim.beginnings import Beginnings
from bench.sim.completion import finish_turn
from bench.sim.cost_profile import CostModel
from bench.sim.events import ARRIVAL, GPU_DONE, LOAD_DONE, EventHeap
from bench.sim.job import Job
from bench.sim.metrics import TurnLog
from bench.sim.prepared import PREPARE, PREPARED, Preparer
from bench.sim.promote import PROMOTE, Promoter
from bench.sim.restore import RestoreChooser
from bench.sim.ssd import SharedBandwidth
from bench.sim.systems import SystemSpec, make_tiers, system_spec
from bench.sim.tiers import DRAM
from bench.sim.workload import Workload
from compute_worker.tensor_choice import TENSOR6
from scheduler.policy import KV_NONE, QueueConfig


class TimedSimulation:
    def __init__(self, workload: Workload, cost: CostModel, spec: SystemSpec,
                 end_oracle: bool = False, max_concurrent_loads: int | None = None,
                 policy_kwargs: dict | None = None,
                 progress: Callable[[int], None] | None = None,
                 prepare_lead_s: float | None = None, prepare_share: float = 1.0) -> None:
        self.w, self.cost, self.spec, self.end_oracle = workload, cost, spec, end_oracle
        self.progress = progress  # called with 1 per measured turn done
        loads = max_concurrent_loads or cost.max_concurrent_loads
        self.queue = QueueConfig(spec.queue, loads, spec.prefetch_window).build()
        self.tensor = cost.tensors.tensor if spec.tensor == "auto" else spec.tensor
        self.stored_bpt = cost.stored_bytes_per_token(self.tensor)
        self.store = make_tiers(spec, cost, policy_kwargs or {})
        self.ssd = SharedBandwidth(cost.ssd_bytes_per_s)
        self.events, self.log = EventHeap(), TurnLog()
        self.jobs: dict[int, Job] = {}
        self.queued: dict[int, Job] = {}  # user -> its queued job (one per user at a time)
        self.running: list[Job] = []
        self.beginnings = Beginnings(self)  # of reversed splits, recomputed while the end loads
        self.gpu_busy, self.gpu_used, self.ctx_sum = False, 0, 0
        self.seq = self.ssd_version = self.reads_in_flight = 0
        self.left_to_measure = workload.measured_count
        self.now = self.gpu_free_at = 0.0  # gpu_free_at: when the GPU step in progress ends
        self.chooser = RestoreChooser(self) if spec.restore_choice else None  # counts in log
        self.promoter = Promoter(self) if spec.promote else None
        tiered = self.store is not None and self.store.ssd is not None  # a client's prepare
        self.prepared = (Preparer(self, prepare_lead_s, prepare_share)  # reads SSD -> DRAM
                         if prepare_lead_s is not None and tiered else None)

    # ---- driver ------------------------------------------------------------------------------
    def run(self) -> TurnLog:
        w, events = self.w, self.events
        for i in w.first_turns:
            events.push(w.first_arrival(i), ARRIVAL, i)
        while events and self.left_to_measure > 0:
            now, _, kind, payload = events.pop()
            self.now = now
            if kind == ARRIVAL:
                arrive(self, payload, now)
            elif kind == LOAD_DONE:
                if payload == self.ssd_version:
                    self._loads_done(now)
            elif kind == PROMOTE:
                self.promoter.timer(now)
            elif kind == PREPARE:
                self.prepared.said(payload, now)
            else:
                self._gpu_done(payload, now)
        return self.log

    # ---- loads -------------------------------------------------------------------------------
    def start_loads(self, now: float) -> None:
        started = False
        while True:
            req = self.queue.next_load(now, self.reads_in_flight)
            if req is None:
                break
            job = self.jobs[req.request_id]
            if job.user not in self.store.ssd:  # fell out of the SSD while waiting: recompute
                self.queue.load_finished(req.request_id)
                continue
            if self.chooser is not None and self.chooser.choose(req, job, now) == 0:
                self.queue.load_finished(req.request_id)  # recompute: as if the KV were lost
                continue
            self.store.pinned.add(job.user)  # a load in flight or landed stays until it runs
            nbytes = self.store.read_from_ssd(job.user, now)
            if job.split_k:  # a prefix only: its share of the bytes
                nbytes = nbytes * job.split_k // job.hist
            elif job.rev_k:  # the end only; its beginning is recomputed meanwhile
                nbytes = nbytes * (job.hist - job.rev_k) // job.hist
                self.beginnings.load_started(job)
            job.load_start = now
            if self.w.measured[job.i]:
                self.log.ssd_bytes += nbytes
            self.ssd.start(req.request_id, nbytes, now, urgent=True)  # promotions pause
            self.reads_in_flight += 1
            started = True
        if started:
            self.arm_ssd()
        if self.prepared is not None:  # a client's prepared read: after the demand loads
            self.prepared.maybe_start(now)
        if self.promoter is not None:
            self.promoter.maybe_start(now)

    def arm_ssd(self) -> None:
        self.ssd_version += 1
        t = self.ssd.next_completion()
        if t is not None:
            self.events.push(t, LOAD_DONE, self.ssd_version)

    def _loads_done(self, now: float) -> None:
        for rid in self.ssd.finish_due(now):
            if isinstance(rid, tuple):  # a write (it only took bandwidth), a promotion, a prepare
                if rid[0] == "p":
                    self.promoter.finished(now)
                elif rid[0] == PREPARED:
                    self.prepared.finished(now)
                continue
            self.reads_in_flight -= 1
            job = self.jobs[rid]
            if not (job.split_k or job.rev_k):  # a part is a staging copy; the whole KV
                self.store.admit_loaded(job.user, now)  # enters DRAM at write-back
            if self.w.measured[job.i]:
                self.log.load_s.append(now - job.load_start)
            job.landed = True
            if not job.rev_k or self.beginnings.landed(job):
                self.queue.load_finished(rid)
        self.evict(now)
        self.arm_ssd()
        self.start_loads(now)
        self.schedule_gpu(now)

    def evict(self, now: float) -> None:
        """Evict to the DRAM limit; a queued DRAM hit that lost its KV must now load it again."""
        store = self.store
        for user in store.evict(now, lambda: self.queue.upcoming(self.spec.lookahead)):
            if self.promoter is not None:
                self.promoter.evicted(user, now)
            job = self.queued.get(user)
            if job is None or user not in store.ssd:
                continue  # nothing queued, or the KV is gone for good (recomputed at dispatch)
            if self.queue.kv_evicted(job.i, store.ssd.size(user)) is not None and job.hit:
                job.hit = False
                self.log.hits -= 1
                self.log.misses += 1

    # ---- the GPU -----------------------------------------------------------------------------
    def schedule_gpu(self, now: float) -> None:
        if self.gpu_busy:
            return
        batch = self._take_prefill_batch(now)
        if batch:
            self._start_prefill(batch, now)
        elif self.running:
            self._start_decode(now)

    def gpu_kv_bytes(self, job: Job) -> int:
        """The GPU KV a turn holds from dispatch to its last token (history, query, answer)."""
        w = self.w
        return (job.hist + w.query[job.i] + w.answer[job.i]) * self.cost.kv_bytes_per_token

    def _take_prefill_batch(self, now: float) -> list[Job]:
        cost, queue, w = self.cost, self.queue, self.w
        batch: list[Job] = []
        tokens = 0
        used = self.gpu_used
        while len(self.running) + len(batch) < cost.max_batch:
            req = queue.peek_ready()
            if req is None:
                break
            job = self.jobs[req.request_id]
            i = job.i
            store = self.store
            # a DRAM hit or a finished load; KV that fell out of every tier is recomputed
            rev = job.piece == 3  # a reversed split: its end landed, its beginning (partly) done
            cached = rev or req.kv_location != KV_NONE and store.location(job.user) == DRAM
            restored = job.hist if cached else job.split_k  # tokens of history not recomputed
            new = w.query[i] + job.hist - restored + (job.rev_k - job.piece_done if rev else 0)
            gpu_bytes = self.gpu_kv_bytes(job)
            extra = 0 if job.gpu_held else gpu_bytes
            alone = not batch and not self.running
            if not alone and (used + extra > cost.gpu_kv_bytes
                              or (batch and tokens + new > cost.max_prefill_tokens)):
                break
            queue.pop_ready()
            del self.queued[job.user]
            if store is not None:
                store.pinned.add(job.user)
            job.dispatch, job.new_tokens, job.gpu_bytes = now, new, gpu_bytes
            job.ctx = restored  # tokens the new ones attend to
            copied = restored - job.rev_k if rev else restored  # the piece's KV is on the GPU
            if copied:
                job.pcie_bytes = copied * self.stored_bpt
                job.restore_tokens = copied if self.tensor == TENSOR6 else 0
            used, tokens = used + extra, tokens + new
            batch.append(job)
        self.beginnings.batch(batch, used, tokens)
        return batch

    def _start_prefill(self, batch: list[Job], now: float) -> None:
        cost = self.cost
        flops = pcie = 0.0
        restore = cost.restore_flops_per_token(self.tensor)
        for job in batch:
            left = job.rev_k - job.piece_done if job.piece == 3 else 0  # its beginning's rest
            flops += (cost.prefill_flops(job.new_tokens - left, job.ctx) + job.restore_tokens * restore
                      + (cost.prefill_flops(left, job.piece_done) if left else 0.0))
            pcie += job.pcie_bytes
            if not job.gpu_held:
                self.gpu_used += job.gpu_bytes
                job.gpu_held = True
        self.gpu_busy = True
        self.gpu_free_at = now + cost.prefill_step_time(flops, pcie)
        self.events.push(self.gpu_free_at, GPU_DONE, batch)

    def _start_decode(self, now: float) -> None:
        cost, n = self.cost, len(self.running)
        if self.spec.piggyback and self.beginnings and self.beginnings.ride(now):
            return
        kmax = min(j.remaining for j in self.running)
        horizon = self.events.next_time()
        t, ctx, k = now, self.ctx_sum, 0
        while k < kmax:
            t += cost.decode_step_time(n, ctx)
            ctx += n
            k += 1
            if t >= horizon:
                break
        self.gpu_busy, self.gpu_free_at = True, t
        self.events.push(t, GPU_DONE, k)

    def _gpu_done(self, payload, now: float) -> None:
        self.gpu_busy = False
        finished: list[Job] = []
        if isinstance(payload, list):  # a prefill step: each request has its first token
            for job in payload:
                if job.piece == 2:  # a reversed split's beginning, not a first token
                    self.beginnings.computed(job, job.rev_k - job.piece_done)
                    continue
                job.first_token = now
                job.remaining = self.w.answer[job.i] - 1
                job.ctx = job.hist + self.w.query[job.i] + 1
                self.ctx_sum += job.ctx
                (finished if job.remaining == 0 else self.running).append(job)
        else:
            k = payload
            if isinstance(payload, tuple):  # one decode step that carried part of a beginning
                k = 1
                self.beginnings.computed(*payload)
            still = []
            for job in self.running:
                job.remaining -= k
                job.ctx += k
                (finished if job.remaining <= 0 else still).append(job)
            self.ctx_sum += k * len(self.running)
            self.running = still
        for job in finished:
            finish_turn(self, job, now)
        self.schedule_gpu(now)


def simulate_system(workload: Workload, cost: CostModel, name: str, end_oracle: bool = True,
                    progress: Callable[[int], None] | None = None, **kwargs: Any) -> TurnLog:
    """System `name` (see bench.sim.systems) replayed on `workload` with fresh policies."""
    return TimedSimulation(workload, cost, system_spec(name), end_oracle=end_oracle,
                           progress=progress, **kwargs).run()
