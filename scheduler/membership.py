"""Who registered when: members that stop sending heartbeats are dropped (pure; time is an
argument). Members from the static configuration (--workers, --store) never expire and cannot
be removed or replaced at run time: a Register of their address is a no-op, a Deregister is
refused by the service."""
from __future__ import annotations

from typing import Iterable


class Membership:
    def __init__(self, heartbeat_s: float = 2.0, missed: int = 3,
                 static: Iterable[tuple[int, str]] = ()):
        self.heartbeat_s = heartbeat_s
        self.ttl = heartbeat_s * missed
        self.static = frozenset(static)
        self._last_seen: dict[tuple[int, str], float] = {}

    def is_static(self, kind: int, address: str) -> bool:
        return (kind, address) in self.static

    def beat(self, kind: int, address: str, now: float) -> bool:
        """Record a heartbeat; True if the member is new (never for a static one)."""
        if self.is_static(kind, address):
            return False
        new = (kind, address) not in self._last_seen
        self._last_seen[(kind, address)] = now
        return new

    def leave(self, kind: int, address: str) -> bool:
        """Forget a registered member; False if it was not one (static members never are)."""
        return self._last_seen.pop((kind, address), None) is not None

    def expired(self, now: float) -> list[tuple[int, str]]:
        """Members silent for longer than the TTL, forgotten as they are returned."""
        gone = [m for m, seen in self._last_seen.items() if now - seen > self.ttl]
        for member in gone:
            del self._last_seen[member]
        return gone
