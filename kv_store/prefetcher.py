"""Predictive promotion in the live store (`--eviction bidaw-prefetch`): SSD -> DRAM reads of
the sessions the policy expects back soon, on disk time that demand loads leave idle.

The plan is the cache simulator's (bench/sim/cache_bandwidth.py), from the same pure parts: the
PrefetchPlanner orders the sessions evicted to SSD by expected return (the policy's
`return_window`, in its clock; by the policy's `prefetch_cost` once the disk is behind), and the
policy says which DRAM a promotion may take
(`prefetch_victims`: only entries worth less than it, never one leased, pinned, queued or being
written; exactly those are evicted). The I/O is the store's read path, on this thread, one
read at a time, begun only while the Promoter has no demand load queued or running
(`Promoter.begin_speculative`), and read in the background (tiers/read_gate.py): in small
chunks, each waiting while a demand read is on the disk, so a demand read asked for meanwhile
waits for at most the chunks already issued. A demand read of the session being read takes that
read over (it stops yielding) and finds the KV in DRAM when it lands. A refusal is weighed
again at the next change (a session back, one leaving DRAM, the disk idle) or after `POLL_S`.
A promoted session not back by its window's high quantile is not promoted again until it is
(the planner's rule).

Counted: speculative reads and their bytes (part of the store's ssd_bytes_read), and prefetch
hits: a session promoted this way that is in DRAM when it comes back (its arrival, or else its
first access; one back, or asked for by a demand read, while its read is still in flight is
not a hit, as in the simulator).
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from services.runtime import metrics

from kv_store import errors
from kv_store.eviction.base import Key
from kv_store.eviction.prefetch_planner import PrefetchPlanner
from kv_store.prefetch_policy import PrefetchingPolicy
from kv_store.promoter import Promoter
from kv_store.read_path import ReadPath
from kv_store.store_state import Tier
from kv_store.tier_space import TierSpace
from kv_store.tiers.aligned_io import align_up

log = logging.getLogger("bidaw.kv_store")
POLL_S = 1.0  # the longest wait between two looks at the plan


@dataclass
class PrefetchCounters:
    prefetches: int = 0              # speculative reads from SSD
    speculative_bytes_read: int = 0  # their bytes (within ssd_bytes_read)
    prefetch_hits: int = 0           # sessions back while their prefetched KV was in DRAM
    prefetch_hit_bytes: int = 0
    prefetches_refused: int = 0      # candidates the policy would not give DRAM to


class Prefetcher:
    def __init__(self, policy: PrefetchingPolicy, space: TierSpace, reads: ReadPath,
                 promoter: Promoter, lock: threading.RLock):
        self.policy = policy
        self.space = space
        self.reads = reads
        self.promoter = promoter
        self._lock = lock
        self.gate = space.index.ssd.gate  # its reads yield the disk to demand reads
        self.planner = PrefetchPlanner(policy.inner.horizon_s)
        self.counters = PrefetchCounters()
        self._unused: dict[Key, int] = {}  # prefetched, in DRAM, not back yet: key -> bytes
        self._reading: Key | None = None  # the session being read speculatively now
        self._back_meanwhile = False  # it came back during that read (then no hit: too late)
        self._poke = threading.Event()
        self._stop = threading.Event()
        policy.on_return, policy.on_landed, policy.on_removed = (self.returned, self._landed,
                                                                 self._removed)
        promoter.on_idle = self._poke.set
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    # -- what the store tells it (under the store lock) -------------------------------------

    def returned(self, session_id: Key) -> None:
        """The session is back (a turn arrived, or its KV was read or written)."""
        self.planner.returned(session_id)
        if session_id == self._reading:
            self._back_meanwhile = True
        size = self._unused.pop(session_id, None)
        if size is not None and session_id in self.space.dram:
            self.counters.prefetch_hits += 1
            self.counters.prefetch_hit_bytes += size
            metrics.PREFETCH_HITS.inc()
        self._poke.set()

    def announced(self, session_id: Key) -> None:
        """The session's client says when its turns come (a prepare): no more guesses."""
        self.planner.announced(session_id)

    def ended(self, session_id: Key) -> None:
        """The session ended: never a candidate again."""
        self.planner.forget(session_id)
        self._unused.pop(session_id, None)

    def _landed(self, session_id: Key, size: int) -> None:
        too_late = self._back_meanwhile or self.gate.adopted(session_id)  # asked for in flight
        if not (session_id == self._reading and too_late):
            self._unused[session_id] = size

    def _removed(self, session_id: Key) -> None:
        self._unused.pop(session_id, None)
        if session_id in self.space.index.metas:  # on SSD (the tiers are inclusive)
            now = time.monotonic() / self.policy.scale
            inner = self.policy.inner
            self.planner.evicted(session_id, inner.return_window(session_id), now,
                                 inner.prefetch_cost(session_id))
            self._poke.set()

    # -- the loop ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poke.clear()
            wait = self.step()
            if wait > 0:
                self._poke.wait(wait)

    def step(self) -> float:
        """One look at the plan, and the read it asks for if the disk is free: seconds until
        the next look (0: at once)."""
        if not self.promoter.idle():
            return POLL_S  # the promoter pokes when its last load ends
        with self._lock:
            now = time.monotonic()
            t = now / self.policy.scale
            horizon = self.policy.inner.prefetch_horizon(t)  # shorter as demand fills the disk
            key = self.planner.next(t, horizon_s=horizon)
            if key is None:
                at = self.planner.eligible_at(horizon)
                return POLL_S if at is None else min(max((at - t) * self.policy.scale, 1e-3),
                                                     POLL_S)
            size = self.space.index.ssd.file_bytes.get(key, 0)
            if key not in self.space.index.metas or size <= 0 or key in self.space.dram:
                self.planner.forget(key)  # dropped, or in DRAM again by now
                return 0.0
            victims = self._victims(key, size, now, t)
            if victims is None:
                self.counters.prefetches_refused += 1
                return POLL_S
            if not self.promoter.begin_speculative(key, size):
                return POLL_S
            keep = (set(self.space.dram) - set(victims)) | {key}
            if not self.space.make_room(size, keep=keep):
                self.promoter.end_speculative()
                self.counters.prefetches_refused += 1
                return POLL_S
            self.planner.promoted(key)
            self._reading, self._back_meanwhile = key, False
        try:
            self._read(key, size)
        finally:
            self.promoter.end_speculative()
            with self._lock:
                self._reading = None
        return 0.0

    def _victims(self, key: Key, size: int, now: float, t: float) -> list[Key] | None:
        """What the promotion of `key` would evict (None: the policy refuses)."""
        need = align_up(size) - self.space.dram.arena.free()
        if need <= 0:
            return []
        space = self.space
        pinned = (space.leases.held(now) | space.writer.keys() | space.signals.waiting(now)
                  | {key})
        return self.policy.inner.prefetch_victims(key, t, need, space.dram.size, pinned)

    def _read(self, key: Key, size: int) -> None:
        try:
            with self.policy.speculating(), self.gate.background(key):
                handle = self.reads.open_read(key, speculative=True)
            tier = handle.tier
            handle.release()
        except errors.StoreError as exc:
            log.info("prefetch of %r failed: %s", key, exc.message)
            return
        if tier == Tier.SSD:  # else someone brought it into DRAM first
            with self._lock:
                self.counters.prefetches += 1
                self.counters.speculative_bytes_read += size
            metrics.PREFETCHES.inc()
            metrics.PREFETCH_BYTES.inc(size)

    def close(self) -> None:
        self._stop.set()
        self._poke.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
