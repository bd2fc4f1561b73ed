"""The asyncio face of the fair admission queue: `async with admission.slot(tenant)` enters
once the turn holds a slot, or raises Shed at once (queue full) or at its deadline."""
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Callable

from services.gateway.admission import ADMITTED, CANCELLED, FairQueue, Refusal, Waiter, retry_after_header


class Shed(Exception):
    def __init__(self, reason: str, message: str, retry_after: int):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class Slot:
    """A turn's hold on a slot; `requeue()` when the back end refused it as full."""

    def __init__(self, admission: "Admission", waiter: Waiter):
        self._admission = admission
        self.waiter = waiter
        self.requeues = 0

    async def requeue(self) -> None:
        """Back to the head of the FIFO until a slot frees (Shed at the deadline), then a
        short pause, held in the slot, so a back end full of others' turns is not hammered."""
        adm = self._admission
        adm._wake(adm.queue.requeue(self.waiter, adm.clock()))
        await adm._wait(self.waiter)
        self.requeues += 1
        await asyncio.sleep(min(REQUEUE_PAUSE_MAX_S, REQUEUE_PAUSE_S * 2 ** self.requeues))


REQUEUE_PAUSE_S, REQUEUE_PAUSE_MAX_S = 0.05, 2.0


class Admission:
    def __init__(self, queue: FairQueue, clock: Callable[[], float] = time.monotonic):
        self.queue = queue
        self.clock = clock
        self._woken: dict[Waiter, asyncio.Future] = {}

    @contextlib.asynccontextmanager
    async def slot(self, tenant: str, turns: int = 1):
        """`turns`: how many turns the request runs at once (a batch's), each holding a slot."""
        got = self.queue.arrive(tenant, self.clock(), turns)
        if isinstance(got, Refusal):
            raise Shed(got.reason, got.message, retry_after_header(got.retry_after_s))
        await self._wait(got)
        finished = False
        try:
            yield Slot(self, got)
            finished = True  # served: counts for the drain rate; errors and hang-ups do not
        finally:
            if got.state == ADMITTED:  # not if a requeue ended waiting (Shed)
                self._wake(self.queue.release(self.clock(), finished, got.turns))

    async def _wait(self, waiter: Waiter) -> None:
        """Until `waiter` is ADMITTED; Shed at its deadline."""
        if waiter.state == ADMITTED:
            return
        woken = asyncio.get_running_loop().create_future()
        self._woken[waiter] = woken
        try:
            await asyncio.wait_for(asyncio.shield(woken),
                                   max(0.0, waiter.deadline - self.clock()))
        except asyncio.TimeoutError:
            pass
        except asyncio.CancelledError:  # the client went away while waiting
            self._leave(waiter)
            raise
        finally:
            self._woken.pop(waiter, None)
        if waiter.state == ADMITTED:
            return
        self.queue.cancel(waiter)  # still waiting at its deadline (or expired by the queue)
        waited = self.clock() - waiter.arrived
        raise Shed("wait_expired", f"no slot freed within {waited:.0f} s; retry later",
                   retry_after_header(self.queue.retry_after(self.clock(), waiter.tenant)))

    def _leave(self, waiter: Waiter) -> None:
        if waiter.state == ADMITTED:  # granted just as the client left: pass the slot on
            waiter.state = CANCELLED  # released here, not again when the turn unwinds
            self._wake(self.queue.release(self.clock(), False, waiter.turns))
        else:
            self.queue.cancel(waiter)

    def _wake(self, changed: list[Waiter]) -> None:
        for waiter in changed:
            woken = self._woken.get(waiter)
            if woken is not None and not woken.done():
                woken.set_result(waiter.state)
