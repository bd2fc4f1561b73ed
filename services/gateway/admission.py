"""Fair admission under overload: a bounded FIFO of waiting turns per tenant, served
round-robin across tenants, in front of a number of slots (turns let through to the
scheduler at once).

Without it, a full gateway refused with 429 and whoever retried at the right moment won: waits
spread from seconds to minutes. Here a turn that finds every slot taken keeps its place in its
tenant's FIFO; a freed slot goes to the head of the next tenant's FIFO in turn, so one tenant
cannot starve another and, within a tenant, turns go in arrival order. A request running
several turns at once (a batch) holds a slot for each; at the head it waits until they are all
free, and nobody passes it meanwhile (else single turns could keep it out for ever). A turn is refused at
once (429) only when the FIFO is full, or when the measured drain rate says it would wait past
its deadline anyway; its Retry-After is then the time the queue ahead of it takes to drain.

The back end may hold fewer turns than the slots (another gateway replica shares it, or its
queue bound is smaller): a turn it refuses as full goes back to the head of its FIFO, keeping
its place, and the slots in use shrink to what the back end took; each served turn grows them
back by 1/capacity (additive increase), up to `slots`.

Pure: no clock, no I/O, no asyncio; the caller passes `now` (seconds, monotonic). Each gateway
replica keeps its own FIFO: fairness and order hold per replica, not across replicas.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field

WAITING, ADMITTED, EXPIRED, CANCELLED = "waiting", "admitted", "expired", "cancelled"


class DrainRate:
    """Turns finished per second over the last `window_s` seconds (None until one finished)."""

    def __init__(self, window_s: float = 30.0):
        if window_s <= 0:
            raise ValueError("window_s must be > 0")
        self.window_s = window_s
        self._done: deque[float] = deque()
        self._since: float | None = None  # watching since: a young window is shorter

    def watch(self, now: float) -> None:
        """Start watching (the first turn arrived): the rate counts from here."""
        if self._since is None:
            self._since = now

    def record(self, now: float) -> None:
        self.watch(now)
        self._done.append(now)
        self._trim(now)

    def mature(self, now: float) -> bool:
        """Watched for a whole window: the rate is a measurement, not a start-up guess."""
        return self._since is not None and now - self._since >= self.window_s

    def rate(self, now: float) -> float | None:
        self._trim(now)
        if not self._done:
            return None
        # the window is only as long as we have watched; a floor of one second keeps a
        # first burst of finishes from reading as a huge rate
        span = max(1.0, min(self.window_s, now - self._since))
        return len(self._done) / span

    def _trim(self, now: float) -> None:
        while self._done and self._done[0] < now - self.window_s:
            self._done.popleft()


@dataclass(eq=False)
class Waiter:
    tenant: str
    arrived: float
    deadline: float
    state: str = WAITING
    turns: int = 1  # slots it holds once admitted: a batch request runs several turns at once


@dataclass
class Refusal:
    reason: str           # "queue_full", "tenant_queue_full" or "wait_too_long"
    message: str
    retry_after_s: float  # when trying again is likely to find room (from the drain rate)


@dataclass
class FairQueue:
    slots: int                  # turns let through at once
    max_waiting: int            # turns waiting, all tenants together
    tenant_max_waiting: int = 0  # turns one tenant may have waiting (0: max_waiting)
    max_wait_s: float = 120.0   # a turn is never kept waiting longer than this
    fallback_retry_s: float = 1.0  # Retry-After before any turn finished (no rate measured)
    drain: DrainRate = field(default_factory=DrainRate)

    def __post_init__(self):
        if self.slots < 1 or self.max_waiting < 0 or self.tenant_max_waiting < 0:
            raise ValueError("slots must be >= 1, max_waiting and tenant_max_waiting >= 0")
        if self.max_wait_s <= 0:
            raise ValueError("max_wait_s must be > 0")
        self.running = 0
        self.capacity = float(self.slots)  # slots in use: shrinks when the back end is full
        self.waiting = 0
        self._fifos: OrderedDict[str, deque[Waiter]] = OrderedDict()  # round-robin order

    # -- arrivals ------------------------------------------------------------------------

    def arrive(self, tenant: str, now: float, turns: int = 1) -> Waiter | Refusal:
        """A new request of `turns` turns at once (at most `slots`): ADMITTED (its slots are
        free and nobody waits), WAITING (queued; wait for `grant` to admit it) or a Refusal to
        send back at once."""
        if not 1 <= turns <= self.slots:
            raise ValueError(f"turns must be in [1, {self.slots}]")
        self.drain.watch(now)
        waiter = Waiter(tenant, now, now + self.max_wait_s, turns=turns)
        if self._fits(waiter) and not self.waiting:
            self.running += turns
            waiter.state = ADMITTED
            return waiter
        refusal = self._refusal(tenant, now)
        if refusal is not None:
            return refusal
        self._fifos.setdefault(tenant, deque()).append(waiter)
        self.waiting += 1
        return waiter

    def _refusal(self, tenant: str, now: float) -> Refusal | None:
        mine = len(self._fifos.get(tenant, ()))
        limit = self.tenant_max_waiting or self.max_waiting
        if self.waiting >= self.max_waiting:
            return Refusal("queue_full", f"{self.running} turns in flight and {self.waiting} "
                           "waiting; retry later",
                           self.retry_after(now))
        if mine >= limit:
            return Refusal("tenant_queue_full", f"tenant {tenant} has {mine} turns waiting; "
                           "retry later", self.retry_after(now, tenant))
        # refuse on a predicted wait only once the rate is measured: at start-up the first
        # finishes are few and slow, and would turn a short wait into a refusal
        expected = self.expected_wait(now, tenant) if self.drain.mature(now) else None
        if expected is not None and expected > self.max_wait_s:
            return Refusal("wait_too_long", f"the wait would be about {expected:.0f} s, past "
                           f"the gateway's {self.max_wait_s:g} s; retry later",
                           self.retry_after(now, tenant))
        return None

    # -- estimates -----------------------------------------------------------------------

    def ahead_of(self, tenant: str) -> int:
        """Turns served before a new turn of `tenant`: round-robin takes one turn of each
        other tenant per turn of this one, so each other tenant counts up to this one's
        queue length plus one."""
        mine = len(self._fifos.get(tenant, ()))
        others = sum(min(len(q), mine + 1) for t, q in self._fifos.items() if t != tenant)
        return mine + others

    def expected_wait(self, now: float, tenant: str) -> float | None:
        """Seconds until a new turn of `tenant` would get a slot; None: no rate measured."""
        rate = self.drain.rate(now)
        if rate is None:
            return None
        return (self.ahead_of(tenant) + 1) / rate

    def retry_after(self, now: float, tenant: str | None = None) -> float:
        """When the queue ahead (all of it, or what comes before `tenant`) will have drained."""
        rate = self.drain.rate(now)
        if rate is None:
            return self.fallback_retry_s
        ahead = self.waiting if tenant is None else self.ahead_of(tenant)
        return min(self.max_wait_s, max(1.0, ahead / rate))

    # -- departures ----------------------------------------------------------------------

    def release(self, now: float, finished: bool = True, turns: int = 1) -> list[Waiter]:
        """An admitted request of `turns` left (`finished`: it was served, so it counts for
        the drain rate); returns what `grant` returns."""
        if self.running < turns:
            raise RuntimeError("release without an admitted turn")
        self.running -= turns
        if finished:
            self.drain.record(now)
            self.capacity = min(float(self.slots), self.capacity + 1.0 / self.capacity)
        return self.grant(now)

    def requeue(self, waiter: Waiter, now: float) -> list[Waiter]:
        """The back end refused an admitted turn as full: the turn goes back to the head of
        its FIFO (its tenant first in the round), keeping its place and deadline, and the
        slots in use shrink to the turns the back end holds. Returns what `grant` returns."""
        if waiter.state != ADMITTED or self.running < waiter.turns:
            raise RuntimeError("requeue of a turn that holds no slot")
        self.running -= waiter.turns
        self.capacity = float(max(1, self.running))
        waiter.state = WAITING
        self._fifos.setdefault(waiter.tenant, deque()).appendleft(waiter)
        self._fifos.move_to_end(waiter.tenant, last=False)
        self.waiting += 1
        return self.grant(now)

    def _limit(self) -> int:
        return max(1, int(self.capacity))

    def _fits(self, waiter: Waiter) -> bool:
        """Its turns fit in the free slots; a request wider than the slots in use (shrunk
        by a full back end) goes alone, so it is never kept out for good."""
        return self.running + waiter.turns <= self._limit() or not self.running

    def grant(self, now: float) -> list[Waiter]:
        """Fill free slots from the FIFOs, one tenant after another. Returns the waiters whose
        state changed: ADMITTED, or EXPIRED (past their deadline: the caller refuses them)."""
        granted = self.expire(now)
        while self._fifos:
            tenant, fifo = next(iter(self._fifos.items()))
            if not self._fits(fifo[0]):
                break  # the head waits for its slots: nobody passes it, so it gets them
            waiter = fifo.popleft()
            if fifo:
                self._fifos.move_to_end(tenant)
            else:
                del self._fifos[tenant]
            self.waiting -= 1
            self.running += waiter.turns
            waiter.state = ADMITTED
            granted.append(waiter)
        return granted

    def expire(self, now: float) -> list[Waiter]:
        """Drop the waiters whose deadline passed (each FIFO is in deadline order)."""
        gone = []
        for tenant in list(self._fifos):
            fifo = self._fifos[tenant]
            while fifo and fifo[0].deadline <= now:
                waiter = fifo.popleft()
                waiter.state = EXPIRED
                gone.append(waiter)
            if not fifo:
                del self._fifos[tenant]
        self.waiting -= len(gone)
        return gone

    def cancel(self, waiter: Waiter) -> None:
        """A waiter leaves (its client went away, or the caller timed it out)."""
        if waiter.state != WAITING:
            return
        fifo = self._fifos.get(waiter.tenant)
        if fifo is not None and waiter in fifo:
            fifo.remove(waiter)
            self.waiting -= 1
            if not fifo:
                del self._fifos[waiter.tenant]
        waiter.state = CANCELLED


def retry_after_header(seconds: float) -> int:
    """Whole seconds, rounded up, at least 1 (HTTP Retry-After)."""
    return max(1, math.ceil(seconds))
