"""What the parts of the store share: its own tier and format names, counters, argument checks.

The store core speaks these types; the gRPC service (service.py) maps them to and from the wire.
"""
from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

from services.runtime.limits import MAX_SESSION_ID_BYTES

from kv_store import errors


class Tier(enum.Enum):
    """Where a session's KV is; the value is its metrics label."""
    NONE = "none"
    DRAM = "dram"
    SSD = "ssd"
    LOADING = "loading"


class KvFormat(enum.IntEnum):
    """How a session's KV bytes are laid out; the values are the codes SSD records and the
    index store (so they never change)."""
    KV = 1  # keys and values after rotary embedding
    TENSOR6 = 2  # the normalised hidden state feeding Q/K/V (the worker converts it back)


KV_FORMATS = frozenset(KvFormat)


class KvDtype(enum.IntEnum):
    """The element type of a session's KV bytes; the values are the codes SSD records (their
    once-reserved byte) and the index store, so they never change. UNKNOWN: the writer did not
    say (records from before dtypes were kept read as it): stored, but no worker reuses it."""
    UNKNOWN = 0
    FLOAT32 = 1
    BFLOAT16 = 2
    FLOAT16 = 3


KV_DTYPES = frozenset(KvDtype)


@dataclass
class StoreCounters:
    dram_hits: int = 0
    ssd_hits: int = 0
    misses: int = 0
    ssd_bytes_read: int = 0
    ssd_bytes_written: int = 0
    kv_bytes_written: int = 0
    dram_evictions: int = 0
    ssd_evictions: int = 0
    answers_observed: int = 0
    arrivals_observed: int = 0
    corrupt_records: int = 0
    ssd_write_failures: int = 0
    shm_reads: int = 0
    shm_writes: int = 0
    prepared_handed_over: int = 0  # prepared loads whose turn took the landed end


class SessionLocks:
    """Serialise the writes and SSD loads of a session, so disk I/O runs outside the store lock
    (striped: a bounded set of locks, whatever the number of sessions; two rarely share one)."""

    def __init__(self, stripes: int = 1024):
        self._stripes = [threading.Lock() for _ in range(stripes)]

    def __call__(self, session_id: str) -> threading.Lock:
        return self._stripes[hash(session_id) % len(self._stripes)]


def check_session_id(session_id: str) -> None:
    if not session_id:
        raise errors.invalid("session_id is empty")
    if len(session_id.encode()) > MAX_SESSION_ID_BYTES:
        raise errors.invalid(f"session_id longer than {MAX_SESSION_ID_BYTES} bytes")
