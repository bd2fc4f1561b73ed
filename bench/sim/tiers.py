"""The simulator's KV tiers: DRAM ordered by an eviction policy over an inclusive SSD (LRU).

Each tier is a `TierLedger` (the capacity loop the live store runs too); ordering decisions are
the policy's (the very classes the KV store service runs). Sessions with a queued, loading or
running request are pinned: never evicted. The policy sees the same calls as in cache-only mode
— `touch` on a hit at arrival, `admit` when KV enters DRAM, `remove` when it leaves — and
`observe_answer` when a turn finishes. A finished turn's bigger KV replaces the old one in DRAM
without a policy call (the policy learns the new size at the next access, as in cache-only
mode, where sizes change only at accesses).
"""
from __future__ import annotations

from typing import Callable, Hashable, Iterable

from kv_store.eviction.ledger import TierLedger

DRAM, SSD, NONE = "dram", "ssd", "none"


class TieredKV:
    def __init__(self, dram: TierLedger, ssd: TierLedger | None) -> None:
        """`dram` with capacity None: unbounded (no SSD needed). `ssd` None: no SSD tier."""
        self.dram = dram
        self.ssd = ssd
        self.pinned: set[Hashable] = set()

    def location(self, key: Hashable) -> str:
        if key in self.dram:
            return DRAM
        if self.ssd is not None and key in self.ssd:
            return SSD
        return NONE

    def size(self, key: Hashable) -> int:
        return self.dram.size(key) or (self.ssd.size(key) if self.ssd is not None else 0)

    def hit(self, key: Hashable, now: float) -> None:
        self.dram.touch(key, now)

    def read_from_ssd(self, key: Hashable, now: float) -> int:
        """A load starts: bytes to read. Its SSD recency is refreshed."""
        self.ssd.touch(key, now)
        return self.ssd.size(key)

    def admit_loaded(self, key: Hashable, now: float) -> None:
        """A load finished: the KV enters DRAM."""
        if self.ssd is None or key not in self.ssd or key in self.dram:
            return
        self.dram.admit(key, self.ssd.size(key), now)

    def write_back(self, key: Hashable, nbytes: int, now: float) -> None:
        """A turn finished with `nbytes` of KV: it goes to DRAM, and a copy to SSD (inclusive)."""
        if key in self.dram:
            self.dram.resize(key, nbytes)
        else:
            self.dram.admit(key, nbytes, now)
        if self.ssd is not None:
            self.ssd.admit(key, nbytes, now)  # an SSD copy already there: touched, resized
            # Over SSD capacity: the least recently used KV is lost for good (DRAM copy too).
            self.ssd.make_room(0, now, self.pinned, on_evict=self.dram.remove)

    def free(self, key: Hashable) -> None:
        """The session ended (end oracle): its KV leaves both tiers."""
        self.dram.remove(key)
        if self.ssd is not None:
            self.ssd.remove(key)

    def evict(self, now: float, upcoming: Callable[[], Iterable[Hashable]]) -> list[Hashable]:
        """Evict by the policy until DRAM is under its limit (pinned sessions stay); the victims."""
        dram = self.dram
        if dram.fits():
            return []
        dram.policy.observe_queue(upcoming(), now)
        victims: list[Hashable] = []
        dram.make_room(0, now, self.pinned, on_evict=victims.append)  # pins may keep it over
        return victims
