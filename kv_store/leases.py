"""Leases: KV a queued or running request needs is not evicted under it, and shared-memory regions
a co-located worker reads are not freed under it; a dead holder's lease expires. Pure
bookkeeping: time is an argument."""
from __future__ import annotations

import itertools
from collections import Counter


class Leases:
    def __init__(self):
        self._leases: dict[str, tuple[str, float, bool]] = {}  # id -> (session, expiry, pins)
        self._held: Counter[str] = Counter()
        self._ids = itertools.count(1)

    def acquire(self, session_id: str, now: float, seconds: float, pin: bool = True) -> str:
        """A lease on `session_id` until `now + seconds`; `pin` keeps the session's KV from
        being evicted (a read lease only keeps the regions it names, which the store tracks)."""
        lease_id = f"lease-{next(self._ids)}"
        self._leases[lease_id] = (session_id, now + seconds, pin)
        if pin:
            self._held[session_id] += 1
        return lease_id

    def release(self, lease_id: str) -> bool:
        entry = self._leases.pop(lease_id, None)
        if entry is None:
            return False
        if entry[2]:
            self._drop_hold(entry[0])
        return True

    def expire(self, now: float) -> list[str]:
        """Drop the leases past their expiry; returns their ids."""
        gone = [lid for lid, (_, expiry, _) in self._leases.items() if expiry <= now]
        for lease_id in gone:
            self.release(lease_id)
        return gone

    def held(self, now: float) -> set[str]:
        """Sessions under at least one live pinning lease."""
        self.expire(now)
        return set(self._held)

    def __contains__(self, lease_id: str) -> bool:
        return lease_id in self._leases

    def __len__(self) -> int:
        return len(self._leases)

    def _drop_hold(self, session_id: str) -> None:
        self._held[session_id] -= 1
        if self._held[session_id] <= 0:
            del self._held[session_id]
