"""Scheduling queues from one typed config: `QueueConfig("fcfs", prefetch_window=30).build()`,
or the shorthand `make_queue("fcfs", prefetch_window=30)`. A knob a policy lacks is ignored by
it (the FCFS-only ones are read only by the FCFS builder), so callers never switch on the name."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from scheduler.policy.base import RequestQueue
from scheduler.policy.dual_queue import DualQueue
from scheduler.policy.fcfs_queue import FCFSQueue


@dataclass(frozen=True)
class QueueConfig:
    policy: str = "bidaw"
    max_concurrent_loads: int = 2  # SSD -> DRAM loads in flight at once
    prefetch_window: int = 1  # fcfs only: loads start among the first N queued (0: unlimited)
    ssd_aware: bool = True  # fcfs only: False never loads (the worker reads SSD in its step)

    def build(self) -> RequestQueue:
        """A fresh, empty queue of this policy."""
        try:
            builder = _BUILDERS[self.policy]
        except KeyError:
            raise ValueError(f"unknown queue policy {self.policy!r}; "
                             f"known: {', '.join(QUEUE_POLICIES)}") from None
        return builder(self)


_BUILDERS: dict[str, Callable[[QueueConfig], RequestQueue]] = {
    "bidaw": lambda c: DualQueue(c.max_concurrent_loads),
    "fcfs": lambda c: FCFSQueue(c.max_concurrent_loads, c.prefetch_window, c.ssd_aware),
}
QUEUE_POLICIES: tuple[str, ...] = tuple(_BUILDERS)


def make_queue(name: str, **knobs: Any) -> RequestQueue:
    """`QueueConfig(name, **knobs).build()`; a knob QueueConfig does not have raises TypeError."""
    return QueueConfig(name, **knobs).build()
