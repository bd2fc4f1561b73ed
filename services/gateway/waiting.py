"""The asyncio face of the fair admission queue: `async with admission.slot(tenant)` returns
once the turn holds a slot, or raises Shed at once (queue full) or at its deadline."""
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Callable

from .admission import ADMITTED, FairQueue, Refusal, Waiter, retry_after_header


class Shed(Exception):
    def __init__(self, reason: str, message: str, retry_after: int):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class Admission:
    def __init__(self, queue: FairQueue, clock: Callable[[], float] = time.monotonic):
        self.queue = queue
        self.clock = clock
        self._woken: dict[Waiter, asyncio.Future] = {}

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str):
        waiter = await self._admitted(tenant)
        finished = False
        try:
            yield waiter
            finished = True  # served: counts for the drain rate; errors and hang-ups do not
        finally:
            self._wake(self.queue.release(self.clock(), finished))

    async def _admitted(self, tenant: str) -> Waiter:
        now = self.clock()
        got = self.queue.arrive(tenant, now)
        if isinstance(got, Refusal):
            raise Shed(got.reason, got.message, retry_after_header(got.retry_after_s))
        if got.state == ADMITTED:
            return got
        woken = asyncio.get_running_loop().create_future()
        self._woken[got] = woken
        try:
            await asyncio.wait_for(asyncio.shield(woken), max(0.0, got.deadline - now))
        except asyncio.TimeoutError:
            pass
        except asyncio.CancelledError:  # the client went away while waiting
            self._leave(got)
            raise
        finally:
            self._woken.pop(got, None)
        if got.state == ADMITTED:
            return got
        self.queue.cancel(got)  # still waiting at its deadline (or expired by the queue)
        waited = self.clock() - got.arrived
        raise Shed("wait_expired", f"no slot freed within {waited:.0f} s; retry later",
                   retry_after_header(self.queue.retry_after(self.clock(), tenant)))

    def _leave(self, waiter: Waiter) -> None:
        if waiter.state == ADMITTED:  # granted just as the client left: pass the slot on
            self._wake(self.queue.release(self.clock(), finished=False))
        else:
            self.queue.cancel(waiter)

    def _wake(self, changed: list[Waiter]) -> None:
        for waiter in changed:
            woken = self._woken.get(waiter)
            if woken is not None and not woken.done():
                woken.set_result(waiter.state)
