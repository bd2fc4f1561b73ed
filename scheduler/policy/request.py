"""The one record a scheduling queue holds per request, and where its KV can be."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

# Where a request's KV is when it is queued (as the KV store reports it).
KV_NONE = "none"        # no KV to reuse (first turn, or lost): ready at once
KV_DRAM = "dram"        # in the performance layer: ready at once
KV_SSD = "ssd"          # in the capacity layer: must be loaded before it can run
KV_LOADING = "loading"  # a load is already in flight (started by someone else)
KV_LOCATIONS = (KV_NONE, KV_DRAM, KV_SSD, KV_LOADING)

# A queued request's state inside a queue.
READY = "ready"          # may be dispatched (FCFS: only once it is the head)
WAITING = "waiting"      # KV on SSD, no load started yet
LOADING = "loading"      # load in flight; `load_finished` makes it READY


@dataclass(slots=True, eq=False)
class QueuedRequest:
    request_id: Hashable
    session_id: Hashable
    arrival_seq: int      # strictly increasing across `add` calls: defines FCFS order
    arrival_time: float   # seconds, any epoch shared with `now`
    kv_location: str      # one of KV_LOCATIONS, as given to `add`
    kv_bytes: int         # bytes to load from SSD (the HRRN "size")
    state: str = READY
    pos: int = -1         # slot in the queue's arrival-order index (internal)
    slot: int = -1        # slot in the preparing queue's arrays (internal)
