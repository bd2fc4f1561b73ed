"""Scheduling queues by name: `make_queue("bidaw")` or `make_queue("fcfs", prefetch_window=30)`."""
from __future__ import annotations

from typing import Any

from scheduler.policy.base import RequestQueue
from scheduler.policy.dual_queue import DualQueue
from scheduler.policy.fcfs_queue import FCFSQueue

_QUEUES: dict[str, type[RequestQueue]] = {"bidaw": DualQueue, "fcfs": FCFSQueue}
QUEUE_POLICIES: tuple[str, ...] = tuple(_QUEUES)


def make_queue(name: str, **kwargs: Any) -> RequestQueue:
    """A fresh, empty queue. Unknown kwargs raise TypeError."""
    try:
        cls = _QUEUES[name]
    except KeyError:
        raise ValueError(f"unknown queue policy {name!r}; known: {', '.join(QUEUE_POLICIES)}") from None
    return cls(**kwargs)
