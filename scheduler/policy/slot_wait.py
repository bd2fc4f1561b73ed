"""How long a turn waits for a worker slot, as the scheduler learns it from finished turns, for
the load-or-recompute choice's W (when the compute side could start the turn). Pure: no I/O, no
clocks.

A worker runs at most `max_running` turns at once; a turn that finds every slot taken waits for
one to free, and on a small batch (a CPU worker: 6 slots, turns of 10-20 s) that wait, not the
prefill steps ahead, is most of W: a load that lands during it costs nothing, a recompute costs
its prefill on a saturated worker. Slots free at the rate total slots / service time (a turn's
dispatch to its last token, latency less queueing), so a turn with `k` turns ready ahead and
`free` slots free waits about (k + 1 - free) · service / total (0 when a slot is free for it).
The service time is an exponentially weighted mean (`decay` per turn); None until `min_turns`.
"""
from __future__ import annotations


class SlotWait:
    def __init__(self, decay: float = 0.9, min_turns: int = 8) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"SlotWait decay must be in (0, 1), got {decay!r}")
        self.decay, self.min_turns = decay, min_turns
        self.turns = 0
        self._w = self._s = 0.0

    def observe(self, service_s: float) -> None:
        """A finished turn held its slot `service_s` seconds (ignored unless positive)."""
        if not service_s > 0:
            return
        self._w = self._w * self.decay + 1.0
        self._s = self._s * self.decay + service_s
        self.turns += 1

    @property
    def service_s(self) -> float | None:
        return self._s / self._w if self.turns >= self.min_turns else None

    def wait_s(self, ready_ahead: int, free: int, total: int) -> float:
        """Expected wait for a slot of a turn behind `ready_ahead` ready turns, with `free` of
        `total` slots free now."""
        service, short = self.service_s, ready_ahead + 1 - free
        if service is None or total <= 0 or short <= 0:
            return 0.0
        return short * service / total
