"""Which evicted session to promote next (SSD -> DRAM), from the policy's predicted return times.

Candidates are sessions evicted to SSD, each with its return window (expected return, latest
plausible return: `BidawPrefetchPolicy.return_window`) taken when it was evicted; it does not
change until the session's next turn, which makes it a demand read and ends its candidacy. A
candidate is due once its expected return is within `horizon_s`. The next is the due one
expected back soonest, while that one's expected return is still ahead; once it has passed,
the disk has fallen behind the due candidates (the time demand reads leave idle does not read
them all before their users return) and the one of lowest `cost` goes first (given at eviction:
`BidawPrefetchPolicy.prefetch_cost`, bytes read per expected hit), as a deadline scheduler
under overload serves the most value per unit of work. Without a cost: soonest first always.
One past its latest plausible return is dropped. A session promoted but evicted again before
coming back is a candidate again only while that latest plausible return is still ahead: once
it has passed without a return, the session is blocked until it does return (`returned`).
A session whose client announces its turns (`announced`: a prepare, its user typing) is never
a candidate again: its client will say when it is needed, and a guess would only cost reads.

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
        self._queue = LazyHeap()                 # not due yet: key -> (expected, latest)
        self._soonest = LazyHeap()               # due: key -> expected
        self._cheapest = LazyHeap()              # due: key -> (cost, expected)
        self._window: dict[Key, tuple[float, float]] = {}   # every candidate's window
        self._cost: dict[Key, float] = {}
        self._promoted: dict[Key, float] = {}    # promoted, not back yet: key -> latest return
        self._blocked: set[Key] = set()
        self._announcing: set[Key] = set()      # their clients say when they come back

    def evicted(self, key: Key, window: tuple[float, float] | None, now: float,
                cost: float | None = None) -> None:
        """`key` left DRAM for SSD at `now`; `window` its (expected, latest) return, if known;
        `cost` orders it among the due candidates once the disk is behind (lowest first)."""
        if window is None or key in self._blocked or key in self._announcing:
            return
        if window[1] <= now:
            if key in self._promoted:
                self._blocked.add(key)
            return
        self._drop(key)
        self._window[key] = window
        self._cost[key] = window[0] if cost is None else cost
        self._queue.set(key, window)

    def returned(self, key: Key) -> None:
        """`key`'s session came back (its KV is needed now, or was hit): no longer speculative."""
        self._drop(key)
        self._promoted.pop(key, None)
        self._blocked.discard(key)

    def announced(self, key: Key) -> None:
        """`key`'s client said its next turn is coming (and will again): never a candidate."""
        self._drop(key)
        self._announcing.add(key)

    def forget(self, key: Key) -> None:
        """`key`'s session ended (its KV freed): never a candidate."""
        self.returned(key)
        self._announcing.discard(key)

    def next(self, now: float, exclude: frozenset | set = frozenset(),
             horizon_s: float | None = None) -> Key | None:
        """The candidate to promote at `now`, never one in `exclude` (refused just now), or None
        (none is expected back within the horizon: `horizon_s`, else the planner's; a
        candidate once due stays due if the horizon shrinks)."""
        horizon = self.horizon_s if horizon_s is None else horizon_s
        q, soonest, cheapest = self._queue, self._soonest, self._cheapest
        # `expected - horizon <= now`, the very sum `eligible_at` gives: `expected <= now +
        # horizon` can differ in the last bit, and a caller woken at `eligible_at` would find
        # nothing due and be woken again at the same instant, for ever
        while (key := q.peek()) is not None and q.priority(key)[0] - horizon <= now:
            q.discard(key)
            soonest.set(key, self._window[key][0])
            cheapest.set(key, (self._cost[key], self._window[key][0]))
        for heap in (soonest, cheapest):
            while (key := heap.peek(exclude)) is not None:
                expected, latest = self._window[key]
                if latest <= now:  # past its latest plausible return: probably ended
                    self._drop(key)
                    if key in self._promoted:
                        self._blocked.add(key)
                    continue
                if heap is cheapest or expected >= now:
                    return key
                break  # the soonest is overdue: the disk is behind, the cheapest goes first
        return None

    def eligible_at(self, horizon_s: float | None = None) -> float | None:
        """The time the soonest candidate comes within the horizon (`horizon_s`, else the
        planner's; None: no candidate)."""
        horizon = self.horizon_s if horizon_s is None else horizon_s
        times = [self._window[k][0] - horizon
                 for k in (self._soonest.peek(), self._queue.peek()) if k is not None]
        return min(times) if times else None

    def promoted(self, key: Key) -> None:
        """The caller started reading `key` speculatively."""
        window = self._window.get(key)
        self._drop(key)
        if window is not None:
            self._promoted[key] = window[1]

    def _drop(self, key: Key) -> None:
        self._queue.discard(key)
        self._soonest.discard(key)
        self._cheapest.discard(key)
        self._window.pop(key, None)
        self._cost.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._window

    def remembers(self, key: Key) -> bool:
        """Whether anything of `key` is kept (a candidate, promoted, blocked or announcing):
        what `forget` frees."""
        return (key in self._window or key in self._promoted or key in self._blocked
                or key in self._announcing)
