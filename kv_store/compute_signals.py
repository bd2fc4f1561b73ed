"""What the compute side tells the store on the Awareness stream: turns arriving (the queue's
look-ahead for the eviction policy), turns completing with their answer length, sessions ending.

A session whose turn is queued keeps its KV in DRAM for a while (`waiting`): evicting it would
only mean reading it back from SSD. A turn that fails never completes, so that protection
expires on its own after a lease lifetime.
"""
from __future__ import annotations

import threading
import time

from kv_store.eviction.base import EvictionPolicy
from kv_store.leases import Leases
from kv_store.session_index import SessionIndex
from kv_store.store_state import StoreCounters
from kv_store.tiers.ssd_writer import OrderedWriter

MAX_QUEUED = 100_000  # arrivals remembered for the look-ahead; a lost completion must not leak


class ComputeSignals:
    def __init__(self, policy: EvictionPolicy, index: SessionIndex, leases: Leases,
                 writer: OrderedWriter, counters: StoreCounters, lock: threading.RLock,
                 lease_seconds: float):
        self.policy = policy
        self.index = index
        self.leases = leases
        self.writer = writer
        self.counters = counters
        self._lock = lock
        self.lease_seconds = lease_seconds
        self._queued: list[str] = []  # sessions of queued requests, soonest first
        self._queued_at: dict[str, float] = {}  # session -> when its turn arrived

    def on_arrival(self, session_id: str) -> None:
        with self._lock:
            self.counters.arrivals_observed += 1
            self._queued.append(session_id)
            self._queued_at[session_id] = time.monotonic()
            if len(self._queued) > MAX_QUEUED:
                del self._queued[:len(self._queued) - MAX_QUEUED]
            self.policy.observe_queue(list(self._queued), time.monotonic())

    def on_turn_complete(self, session_id: str, answer_tokens: int) -> None:
        with self._lock:
            self.counters.answers_observed += 1
            while session_id in self._queued:
                self._queued.remove(session_id)
            self._queued_at.pop(session_id, None)
            now = time.monotonic()
            self.policy.observe_answer(session_id, answer_tokens, now)
            self.policy.observe_queue(list(self._queued), now)

    def on_session_end(self, session_id: str) -> None:
        with self._lock:
            if session_id not in self.leases.held(time.monotonic()) \
                    and not self.writer.busy(session_id) and session_id in self.index.metas:
                self.index.forget(session_id)

    def waiting(self, now: float) -> set[str]:
        """Sessions whose turn is queued (arrived within a lease lifetime, not yet complete);
        under the store lock."""
        for sid in [s for s, t in self._queued_at.items() if now - t > self.lease_seconds]:
            del self._queued_at[sid]
        return set(self._queued_at)
