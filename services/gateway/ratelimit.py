"""Per-tenant admission: a token bucket of requests per second and a cap on turns in flight.

Pure: no clock, no I/O; the caller passes `now` (seconds, monotonic) so tests drive time.
Both tables stay bounded. A bucket that has refilled to `burst` is the same as a fresh one, so
it is dropped (exactly, with no change in behaviour); past `max_keys` live buckets the least
recently used one is dropped too, which at worst hands that tenant a fresh burst. In-flight
counters exist only while a tenant has a turn in flight.
"""
from __future__ import annotations

import math
from collections import OrderedDict

MAX_KEYS = 4096  # tenants come from configured keys; this only guards against surprises


class RateLimiter:
    """`rate` requests per second per key with bursts of `burst`; rate 0 admits everything."""

    def __init__(self, rate: float, burst: float = 0.0, max_keys: int = MAX_KEYS):
        if rate < 0 or burst < 0 or max_keys < 1:
            raise ValueError("rate and burst must be >= 0 and max_keys >= 1")
        self.rate = float(rate)
        # default burst: one second's worth, and at least one request so any rate can admit
        self.burst = float(burst) if burst else max(1.0, self.rate)
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # key -> tokens, t

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, key: str, now: float) -> float:
        tokens, stamp = self._buckets.get(key, (self.burst, now))
        return min(self.burst, tokens + max(0.0, now - stamp) * self.rate)

    def acquire(self, key: str, now: float) -> float:
        """Take one token for `key`: 0.0 when admitted, else the seconds until one is there."""
        if not self.enabled:
            return 0.0
        self._expire(now)
        tokens = self._tokens(key, now)
        if tokens < 1.0:
            self._store(key, tokens, now)
            return (1.0 - tokens) / self.rate
        self._store(key, tokens - 1.0, now)
        return 0.0

    def _store(self, key: str, tokens: float, now: float) -> None:
        self._buckets[key] = (tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)

    def _expire(self, now: float) -> None:
        """Drop refilled buckets from the least recently used end. It stops at the first one
        still refilling, so a few full ones may linger behind it; max_keys bounds them anyway."""
        while self._buckets:
            key = next(iter(self._buckets))
            if self._tokens(key, now) < self.burst:
                return
            del self._buckets[key]


class InFlight:
    """At most `limit` turns in flight per key; limit 0 admits everything. A request may hold
    several (a batch's turns run at once)."""

    def __init__(self, limit: int):
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self._count: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._count)

    def count(self, key: str) -> int:
        return self._count.get(key, 0)

    def enter(self, key: str, turns: int = 1) -> bool:
        n = self._count.get(key, 0)
        if self.limit and n + turns > self.limit:
            return False
        self._count[key] = n + turns
        return True

    def leave(self, key: str, turns: int = 1) -> None:
        n = self._count.get(key, 0) - turns
        if n > 0:
            self._count[key] = n
        else:
            self._count.pop(key, None)  # no entry for idle tenants: the table stays small


def retry_after_s(wait_s: float) -> int:
    """HTTP Retry-After is whole seconds: round up so a client that obeys it is admitted."""
    return max(1, math.ceil(wait_s))
