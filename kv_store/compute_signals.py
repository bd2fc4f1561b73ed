"""What the compute side tells the store on the Awareness stream: turns arriving (the queue's
look-ahead for the eviction policy), turns completing with their answer length, sessions ending.

A session that ends is forgotten from every tier (DRAM, SSD, the index). If its KV is still
leased to a reader or being written (the turn before the end wrote it behind), that waits:
the store's housekeeping retries (`finish_ends`) until it is free, unless a new turn of the
session arrives first (its client went on after all).

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
MAX_ENDING = 100_000  # ends waiting for a lease or a write; the oldest are dropped beyond


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
        self._ending: dict[str, None] = {}  # ended, KV still leased or being written (in order)

    def on_arrival(self, session_id: str) -> None:
        with self._lock:
            self.counters.arrivals_observed += 1
            self._ending.pop(session_id, None)  # a new turn: the session goes on after all
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
            if not self._forget_if_free(session_id):
                self._ending[session_id] = None
                while len(self._ending) > MAX_ENDING:
                    del self._ending[next(iter(self._ending))]

    def finish_ends(self) -> None:
        """Forget the ended sessions whose lease or write has finished since (housekeeping)."""
        if not self._ending:  # the common case: no lock taken every half second
            return
        with self._lock:
            for session_id in [s for s in self._ending if self._forget_if_free(s)]:
                del self._ending[session_id]

    def _forget_if_free(self, session_id: str) -> bool:
        """Forget `session_id` unless a reader holds it or a write is under way; under the
        store lock. True if nothing of it is left."""
        if session_id in self.leases.held(time.monotonic()) or self.writer.busy(session_id):
            return False
        if session_id in self.index.metas:
            self.index.forget(session_id)
        return True

    def arrived_at(self, session_id: str) -> float | None:
        """When the session's queued turn arrived (None: none queued); under the store lock."""
        return self._queued_at.get(session_id)

    def waiting(self, now: float) -> set[str]:
        """Sessions whose turn is queued (arrived within a lease lifetime, not yet complete);
        under the store lock."""
        for sid in [s for s, t in self._queued_at.items() if now - t > self.lease_seconds]:
            del self._queued_at[sid]
        return set(self._queued_at)
