"""The simulator's KV tiers: DRAM ordered by an eviction policy over an inclusive SSD (LRU).

Byte accounting lives here; ordering decisions are the policy's (the very classes the KV store
service runs). Sessions with a queued, loading or running request are pinned: never evicted.
The policy sees the same calls as in cache-only mode — `touch` on a hit at arrival, `admit` when
KV enters DRAM, `remove` when it leaves — and `observe_answer` when a turn finishes. A finished
turn's bigger KV replaces the old one in DRAM without a policy call (the policy learns the new
size at the next access, as in cache-only mode, where sizes change only at accesses).
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

from kv_store.eviction.base import EvictionPolicy

DRAM, SSD, NONE = "dram", "ssd", "none"


class TieredKV:
    def __init__(self, policy: EvictionPolicy | None, dram_bytes: int | None, watermark_bytes: int,
                 ssd_policy: EvictionPolicy | None, ssd_bytes: int | None) -> None:
        """dram_bytes None: unbounded DRAM (no SSD needed). ssd_policy None: no SSD tier."""
        self.policy = policy
        self.dram_limit = None if dram_bytes is None else dram_bytes - watermark_bytes
        self.ssd_policy = ssd_policy
        self.ssd_limit = ssd_bytes
        self.dram: dict[Hashable, int] = {}
        self.ssd: dict[Hashable, int] = {}
        self.dram_used = 0
        self.ssd_used = 0
        self.pinned: set[Hashable] = set()
        self.evictions = 0
        self.ssd_drops = 0
        self.peak_overcommit = 0  # bytes above the DRAM limit that pins forced us to keep

    def location(self, key: Hashable) -> str:
        if key in self.dram:
            return DRAM
        if key in self.ssd:
            return SSD
        return NONE

    def size(self, key: Hashable) -> int:
        return self.dram.get(key) or self.ssd.get(key, 0)

    def hit(self, key: Hashable, now: float) -> None:
        if self.policy is not None:
            self.policy.touch(key, self.dram[key], now)

    def read_from_ssd(self, key: Hashable, now: float) -> int:
        """A load starts: bytes to read. Its SSD recency is refreshed."""
        nbytes = self.ssd[key]
        if self.ssd_policy is not None:
            self.ssd_policy.touch(key, nbytes, now)
        return nbytes

    def admit_loaded(self, key: Hashable, now: float) -> None:
        """A load finished: the KV enters DRAM."""
        nbytes = self.ssd.get(key)
        if nbytes is None or key in self.dram:
            return
        self._put_dram(key, nbytes, now)

    def write_back(self, key: Hashable, nbytes: int, now: float) -> None:
        """A turn finished with `nbytes` of KV: it goes to DRAM, and a copy to SSD (inclusive)."""
        if key in self.dram:
            self.dram_used += nbytes - self.dram[key]
            self.dram[key] = nbytes
        else:
            self._put_dram(key, nbytes, now)
        if self.ssd_policy is not None:
            old = self.ssd.get(key)
            self.ssd_used += nbytes - (old or 0)
            self.ssd[key] = nbytes
            (self.ssd_policy.touch if old is not None else self.ssd_policy.admit)(key, nbytes, now)
            self._trim_ssd(now)

    def free(self, key: Hashable) -> None:
        """The session ended (end oracle): its KV leaves both tiers."""
        self._drop_dram(key)
        self._drop_ssd(key)

    def evict(self, now: float, upcoming: Callable[[], Iterable[Hashable]]) -> list[Hashable]:
        """Evict by the policy until DRAM is under its limit (pinned sessions stay); the victims."""
        if self.dram_limit is None or self.dram_used <= self.dram_limit or self.policy is None:
            return []
        self.policy.observe_queue(upcoming(), now)
        victims = []
        while self.dram_used > self.dram_limit:
            v = self.policy.victim(now, self.pinned)
            if v is None:
                self.peak_overcommit = max(self.peak_overcommit, self.dram_used - self.dram_limit)
                break
            self._drop_dram(v)
            victims.append(v)
            self.evictions += 1
        return victims

    def _put_dram(self, key: Hashable, nbytes: int, now: float) -> None:
        self.dram[key] = nbytes
        self.dram_used += nbytes
        if self.policy is not None:
            self.policy.admit(key, nbytes, now)

    def _drop_dram(self, key: Hashable) -> None:
        nbytes = self.dram.pop(key, None)
        if nbytes is not None:
            self.dram_used -= nbytes
            if self.policy is not None:
                self.policy.remove(key)

    def _drop_ssd(self, key: Hashable) -> None:
        nbytes = self.ssd.pop(key, None)
        if nbytes is not None:
            self.ssd_used -= nbytes
            if self.ssd_policy is not None:
                self.ssd_policy.remove(key)

    def _trim_ssd(self, now: float) -> None:
        """Over SSD capacity: the least recently used KV is lost for good (DRAM copy too)."""
        while self.ssd_limit is not None and self.ssd_used > self.ssd_limit:
            v = self.ssd_policy.victim(now, self.pinned)
            if v is None:
                return
            self._drop_ssd(v)
            self._drop_dram(v)
            self.ssd_drops += 1
