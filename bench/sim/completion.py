"""What a finished turn leaves behind in the timed simulation (bench.sim.engine)."""
from __future__ import annotations

from typing import Any

from bench.sim.events import ARRIVAL
from bench.sim.job import Job


def finish_turn(sim: Any, job: Job, now: float) -> None:
    """A turn's last token: its figures, its new KV appended on SSD and written back to DRAM
    (freed at once if the end oracle says the conversation is over), the user's next turn and
    its client's prepare (bench.sim.prepared)."""
    w, store, i = sim.w, sim.store, job.i
    sim.gpu_used, sim.ctx_sum = sim.gpu_used - job.gpu_bytes, sim.ctx_sum - job.ctx
    del sim.jobs[i]
    if w.measured[i]:
        sim.log.add(job.arrival, job.dispatch, job.first_token, now)
        sim.left_to_measure -= 1
        if sim.progress is not None:
            sim.progress(1)
    if store is not None:
        user = job.user
        tokens = min(w.history[i] + w.query[i] + w.answer[i], sim.cost.max_kv_tokens)
        if store.ssd is not None:  # the new tokens are appended to the SSD copy
            written = (tokens - job.hist) * sim.stored_bpt
            if written > 0:
                sim.ssd.start(("w", i), written, now)
                sim.arm_ssd()
        store.pinned.discard(user)
        store.write_back(user, tokens * sim.stored_bpt, now)
        store.dram.policy.observe_answer(user, w.answer[i], now)
        if sim.end_oracle and w.last[i]:
            store.free(user)
            if sim.promoter is not None:
                sim.promoter.forget(user)
        sim.evict(now)
        sim.start_loads(now)
    if (j := w.next_turn[i]) >= 0:
        at = w.next_arrival(i, j, now)
        sim.events.push(at, ARRIVAL, j)  # first: a prepare said at the arrival itself is late
        if sim.prepared is not None:  # its client says it is coming (its user starts typing)
            sim.prepared.schedule(j, now, at)
