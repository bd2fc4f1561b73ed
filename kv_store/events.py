"""What the store tells the compute side on the Awareness stream, and the fan-out to streams."""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from kv_store.store_state import Tier


@dataclass
class Location:
    session_id: str
    tier: Tier
    num_bytes: int
    num_tokens: int
    load_estimate_s: float
    waiting_for_room: bool = False  # a load was asked for and waits for DRAM room (promotions.py)
    landed_from_token: int = 0  # a prepared load read end first: tokens from here on landed


@dataclass
class LoadDone:
    session_id: str
    ok: bool
    load_s: float


class EventHub:
    """Every subscriber (one per Awareness stream) gets every event, in publication order."""

    def __init__(self):
        self._subscribers: list[queue.Queue] = []
        self._lock = threading.Lock()

    def subscribe(self) -> queue.Queue:
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._subscribers.append(q)
        return q

    def unsubscribe(self, q: queue.Queue) -> None:
        with self._lock:
            if q in self._subscribers:
                self._subscribers.remove(q)

    def publish(self, event) -> None:
        with self._lock:
            for q in self._subscribers:
                q.put(event)
