"""What the parts of the store share: tier names, counters, argument checks."""
from __future__ import annotations

from dataclasses import dataclass

from services.runtime.gen import common_pb2
from services.runtime.limits import MAX_SESSION_ID_BYTES

from kv_store import errors

TIER_NONE, TIER_DRAM, TIER_SSD, TIER_LOADING = (common_pb2.TIER_NONE, common_pb2.TIER_DRAM,
                                                common_pb2.TIER_SSD, common_pb2.TIER_LOADING)


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


def check_session_id(session_id: str) -> None:
    if not session_id:
        raise errors.invalid("session_id is empty")
    if len(session_id.encode()) > MAX_SESSION_ID_BYTES:
        raise errors.invalid(f"session_id longer than {MAX_SESSION_ID_BYTES} bytes")
