"""The gateway's /health: ready only while the whole serving path is: the scheduler answers, it
has a healthy compute worker, it knows a KV store and its Awareness stream to the store is up.
Otherwise 503 with the reasons (a load balancer takes this gateway out; a human reads why).

The verdict is cached for a moment: probes and dashboards may poll it often, and each check costs
the scheduler two RPCs.
"""
from __future__ import annotations

import asyncio
import time

from services.runtime.gen import scheduler_pb2

from services.gateway.backend import Backend


def problems(stats: scheduler_pb2.SchedulerStats) -> list[str]:
    """What is missing from the serving path, by the scheduler's own view (pure)."""
    found = []
    if stats.workers == 0:
        found.append("no healthy compute worker")
    if stats.stores == 0:
        found.append("no KV store known to the scheduler")
    elif not stats.awareness_connected:
        found.append("the scheduler's Awareness stream to the KV store is disconnected")
    return found


class HealthCheck:
    def __init__(self, backend: Backend, cache_s: float = 1.0, timeout_s: float = 2.0):
        self.backend = backend
        self.cache_s = cache_s
        self.timeout_s = timeout_s
        self._verdict: list[str] = []
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    async def problems(self) -> list[str]:
        """Empty when healthy; the reasons otherwise (at most `cache_s` old)."""
        async with self._lock:  # one check at a time; the others get its verdict
            if time.monotonic() - self._at >= self.cache_s:
                self._verdict = await self._check()
                self._at = time.monotonic()
            return list(self._verdict)

    async def _check(self) -> list[str]:
        if not await self.backend.healthy(self.timeout_s):
            return ["the scheduler is unreachable or not serving"]
        stats = await self.backend.stats(self.timeout_s)
        if stats is None:
            return ["the scheduler does not answer Stats"]
        return problems(stats)
