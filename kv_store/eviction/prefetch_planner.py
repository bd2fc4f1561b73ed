"""Which evicted session to promote next (SSD -> DRAM), from the policy's predicted return times.

Candidates are sessions evicted to SSD, each with its return window (expected return, latest
plausible return: `BidawPrefetchPolicy.return_window`) taken when it was evicted; it does not
change until the session's next turn, which makes it a demand read and ends its candidacy. The
next candidate is the one expected back soonest, if that is within `horizon_s`; one past its
latest plausible return is dropped. A session promoted but evicted again before coming back is a
candidate again only while that latest plausible return is still ahead: once it has passed
without a return, the session is blocked until it does return (`returned`).

The caller owns the I/O (the read queue, demand reads first) and asks the policy whether the
DRAM may be taken. Pure: no clocks, time is an argument; O(log n) per operation.
"""
from __future__ import annotations

from kv_store.eviction.base import Key
from kv_store.eviction.lazy_heap import LazyHeap


class PrefetchPlanner:
    def __init__(self, horizon_s: float = 30.0) -> None:
        if horizon_s < 0:
            raise ValueError(f"prefetch horizon must be >= 0 seconds, got {horizon_s}")
        self.horizon_s = horizon_s
        self._queue = LazyHeap()                 # key -> (expected return, latest return)
        self._promoted: dict[Key, float] = {}    # promoted, not back yet: key -> latest return
        self._blocked: set[Key] = set()

    def evicted(self, key: Key, window: tuple[float, float] | None, now: float) -> None:
        """`key` left DRAM for SSD at `now`; `window` its (expected, latest) return, if known."""
        if window is None or key in self._blocked:
            return
        if window[1] <= now:
            if key in self._promoted:
                self._blocked.add(key)
            return
        self._queue.set(key, window)

    def returned(self, key: Key) -> None:
        """`key`'s session came back (its KV is needed now, or was hit): no longer speculative."""
        self._queue.discard(key)
        self._promoted.pop(key, None)
        self._blocked.discard(key)

    def forget(self, key: Key) -> None:
        """`key`'s session ended (its KV freed): never a candidate."""
        self.returned(key)

    def next(self, now: float) -> Key | None:
        """The candidate to promote at `now`, or None (none is expected back within the horizon)."""
        q = self._queue
        while True:
            key = q.peek()
            if key is None:
                return None
            expected, latest = q.priority(key)
            if latest > now:
                return key if expected <= now + self.horizon_s else None
            q.discard(key)  # past its latest plausible return: probably ended
            if key in self._promoted:
                self._blocked.add(key)

    def eligible_at(self) -> float | None:
        """The time the soonest candidate comes within the horizon (None: no candidate)."""
        key = self._queue.peek()
        return None if key is None else self._queue.priority(key)[0] - self.horizon_s

    def promoted(self, key: Key) -> None:
        """The caller started reading `key` speculatively."""
        window = self._queue.priority(key) if key in self._queue else None
        self._queue.discard(key)
        if window is not None:
            self._promoted[key] = window[1]

    def __contains__(self, key: object) -> bool:
        return key in self._queue
