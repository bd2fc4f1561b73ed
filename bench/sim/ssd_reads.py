"""What the cache-only replay with SSD time counts, and one read on its SSD (cache_bandwidth.py)."""
from __future__ import annotations

from dataclasses import dataclass

from bench.sim.cache import CacheResult


@dataclass
class BandwidthResult(CacheResult):
    ssd_read_bytes: int = 0            # demand + speculative + prepared
    speculative_read_bytes: int = 0    # promotions the policy predicted (bidaw-prefetch)
    prefetches: int = 0
    prefetch_hits: int = 0             # turns that hit KV promoted before they arrived
    prefetch_hit_bytes: int = 0
    prepared_read_bytes: int = 0       # reads a client asked for ahead (--prepare-lead-s)
    prepared_reads: int = 0
    prepare_hits: int = 0              # turns that hit KV a client's prepare brought in
    prepare_hit_bytes: int = 0

    def count_hit(self, size: int, prefetched: bool = False, prepared: bool = False) -> None:
        """A turn inside the window found its KV in DRAM (brought in by a promotion or a
        client's prepare, or neither)."""
        self.hits += 1
        self.hit_bytes += size
        if prefetched:
            self.prefetch_hits += 1
            self.prefetch_hit_bytes += size
        if prepared:
            self.prepare_hits += 1
            self.prepare_hit_bytes += size

    def count_read(self, r: "SsdRead") -> None:
        """A read begun inside the window."""
        self.ssd_read_bytes += r.size
        if r.speculative:
            self.speculative_read_bytes += r.size
            self.prefetches += 1
        elif r.prepared:
            self.prepared_read_bytes += r.size
            self.prepared_reads += 1

    def as_dict(self) -> dict:
        demand = self.ssd_read_bytes - self.speculative_read_bytes - self.prepared_read_bytes
        return {**super().as_dict(), "ssd_read_bytes": self.ssd_read_bytes,
                "speculative_read_bytes": self.speculative_read_bytes,
                "demand_read_bytes": demand,
                "prefetches": self.prefetches, "prefetch_hits": self.prefetch_hits,
                "prefetch_hit_bytes": self.prefetch_hit_bytes,
                "prepared_read_bytes": self.prepared_read_bytes,
                "prepared_reads": self.prepared_reads, "prepare_hits": self.prepare_hits,
                "prepare_hit_bytes": self.prepare_hit_bytes}


class SsdRead:
    """One read of a session's KV: demand (a turn missed), speculative (a promotion the policy
    predicted) or prepared (a client said the turn is coming)."""
    __slots__ = ("key", "size", "start", "done", "speculative", "prepared", "arrival", "answer")

    def __init__(self, key, size: int, speculative: bool = False,
                 prepared: bool = False) -> None:
        self.key, self.size = key, size
        self.speculative, self.prepared = speculative, prepared
        self.start = self.done = 0.0
        self.arrival: float | None = None   # the turn that needed it (None: nobody yet)
        self.answer = 0
