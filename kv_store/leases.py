"""Leases: KV a queued or running request needs is not evicted under it; a dead holder's lease
expires. Pure bookkeeping: time is an argument."""
from __future__ import annotations

import itertools
from collections import Counter


class Leases:
    def __init__(self):
        self._leases: dict[str, tuple[str, float]] = {}  # lease id -> (session, expiry)
        self._held: Counter[str] = Counter()
        self._ids = itertools.count(1)

    def acquire(self, session_id: str, now: float, seconds: float) -> str:
        lease_id = f"lease-{next(self._ids)}"
        self._leases[lease_id] = (session_id, now + seconds)
        self._held[session_id] += 1
        return lease_id

    def release(self, lease_id: str) -> bool:
        entry = self._leases.pop(lease_id, None)
        if entry is None:
            return False
        self._drop_hold(entry[0])
        return True

    def expire(self, now: float) -> None:
        for lease_id, (session_id, expiry) in list(self._leases.items()):
            if expiry <= now:
                del self._leases[lease_id]
                self._drop_hold(session_id)

    def held(self, now: float) -> set[str]:
        """Sessions under at least one live lease."""
        self.expire(now)
        return set(self._held)

    def __len__(self) -> int:
        return len(self._leases)

    def _drop_hold(self, session_id: str) -> None:
        self._held[session_id] -= 1
        if self._held[session_id] <= 0:
            del self._held[session_id]
