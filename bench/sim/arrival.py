"""A turn arrives in the timed simulation (bench.sim.engine): where its KV is, hit or miss, and
its place in the scheduling queue. A read already under way for its KV (a promotion,
bench.sim.promote, or a client's prepared read, bench.sim.prepared) is waited for, not repeated."""
from __future__ import annotations

from typing import Any

from bench.sim.job import Job
from bench.sim.restore import where_on_arrival
from bench.sim.tiers import DRAM, SSD
from scheduler.policy import KV_DRAM, KV_LOADING, KV_NONE, KV_SSD


def arrive(sim: Any, i: int, now: float) -> None:
    w, store = sim.w, sim.store
    user = w.user[i]
    job = Job(i, user, now)
    job.hist = hist = min(w.history[i], sim.cost.max_kv_tokens)
    where = KV_NONE
    reader = sim.promoter if sim.promoter is not None and sim.promoter.arrived(job) else None
    prepared = sim.prepared is not None and sim.prepared.arrived(job)  # entered DRAM just now
    if sim.prepared is not None and sim.prepared.reading == user:
        reader = sim.prepared
    if hist > 0 and store is not None:
        loc = store.location(user)
        if loc == DRAM:
            where = KV_DRAM
            if not prepared:  # (a prepared KV's admission was this turn's access)
                store.hit(user, now)
        elif loc == SSD:
            where = where_on_arrival(sim, job, reader, now)
        if w.measured[i]:
            job.hit = loc == DRAM
            sim.log.hits += job.hit
            sim.log.misses += not job.hit
        if sim.spec.pin_queued:
            store.pinned.add(user)
    elif hist > 0 and w.measured[i]:
        sim.log.misses += 1  # recompute: nothing cached
    sim.jobs[i] = sim.queued[user] = job
    sim.seq += 1
    kv_bytes = store.size(user) if where in (KV_SSD, KV_LOADING) else 0
    sim.queue.add(i, user, sim.seq, now, where, kv_bytes)
    sim.start_loads(now)
    sim.schedule_gpu(now)
