"""Scheduling queues: pure policies (no I/O, no clocks — `now` is an argument, in seconds).

The scheduler service and the simulator drive them the same way::

    q = QueueConfig("bidaw", max_concurrent_loads=2).build()  # or make_queue("fcfs", ...)
    q.add(request_id, session_id, arrival_seq, arrival_time, kv_location, kv_bytes) -> QueuedRequest
        # kv_location: "none" | "dram" (ready at once) | "ssd" (needs a load) | "loading"
        # arrival_seq: strictly increasing; it is the FCFS order
    while (r := q.next_load(now, loads_in_flight)) is not None:   # SSD loads to start now
        start_load(r.session_id, r.kv_bytes); loads_in_flight += 1
    q.load_finished(request_id)          # KV now in DRAM: READY at its original arrival position
    q.peek_ready() / q.pop_ready()       # what to dispatch next (None: nothing may run now)
    q.kv_evicted(request_id, kv_bytes)   # a READY request's KV left DRAM: WAITING again, same place
    q.remove(request_id)                 # cancel, in any state
    q.upcoming(n) -> [session_id, ...]   # next n queued requests in arrival order (look-ahead)
    len(q), request_id in q, q.get(request_id), q.lengths() -> {"ready", "waiting", "loading"}
    q.ready_len, q.waiting_len, q.loading_len

Policies:

- "bidaw" (`DualQueue`): ready queue FCFS by arrival_seq; preparing queue picks the next SSD load
  by disk-HRRN, R = 1 + waiting_time / kv_bytes (ties: smaller KV, then earlier arrival); a
  finished load goes back at its original arrival position. A request waiting for its KV never
  blocks one whose KV is ready.
- "fcfs" (`FCFSQueue`): one queue in arrival order; the head blocks until its KV is loaded. Loads
  start in arrival order among the first `prefetch_window` requests (1: load at the head;
  30: CachedAttention's look-ahead prefetch; 0: unlimited). `ssd_aware=False`: the queue
  ignores where KV is (never loads; the worker reads SSD inside its step, as vLLM + LMCache do).

Load or recompute (`restore_choice`): for a turn whose KV is on SSD,
`decide_restore(KVOnSSD(...), ComputeSide(...))` picks WAIT_FOR_LOAD, RECOMPUTE or SPLIT (load a
prefix, recompute the rest; SPLIT_REVERSED with `suffix_loads=True`) by the earliest expected
first token that delays no turn ahead (`stall_weight`: also the running decodes' stall); see its
docstring for the model. `PrefillRate` (prefill_rate.py) learns the compute side's step from
finished turns for the live scheduler (scheduler/restore_chooser.py).

Costs: add, load_finished, pop_ready O(log n); remove O(log n) amortised; upcoming(n) O(n α);
next_load O(n) vectorised for "bidaw" (one numpy argmax, tens of µs at 10,000 queued; R's order
changes with time so no static key exists), O(log n + window) for "fcfs".
"""
from scheduler.policy.base import RequestQueue
from scheduler.policy.dual_queue import DualQueue
from scheduler.policy.fcfs_queue import FCFSQueue
from scheduler.policy.registry import QUEUE_POLICIES, QueueConfig, make_queue
from scheduler.policy.request import (KV_DRAM, KV_LOADING, KV_LOCATIONS, KV_NONE, KV_SSD,
                                      LOADING, READY, WAITING, QueuedRequest)
from scheduler.policy.restore_choice import (RECOMPUTE, SPLIT, SPLIT_REVERSED, WAIT_FOR_LOAD,
                                             ComputeSide, KVOnSSD, Option, PrefillCost,
                                             RestoreChoice, decide_restore)

__all__ = ["RequestQueue", "DualQueue", "FCFSQueue", "QUEUE_POLICIES", "QueueConfig",
           "make_queue", "QueuedRequest", "KV_NONE", "KV_DRAM", "KV_SSD", "KV_LOADING", "KV_LOCATIONS",
           "READY", "WAITING", "LOADING",
           "decide_restore", "KVOnSSD", "ComputeSide", "PrefillCost", "RestoreChoice", "Option",
           "WAIT_FOR_LOAD", "RECOMPUTE", "SPLIT", "SPLIT_REVERSED"]
