"""Promotions (SSD -> DRAM loads): in the order the scheduler asks for them (it already ranks
them by disk-HRRN), at most `concurrency` at once, with load-time estimates from the bandwidth
the SSD tier measures (or the cap, when one emulates a slower disk).

Prepared loads (a client said its user is typing: the turn has not arrived yet) queue behind
every demand load (a turn already waiting is never delayed for one that may come), in their own
order; a demand request for a session whose prepared load is still queued moves it to the demand
queue.

A load that finds no room in DRAM (it is full of KV that cannot go yet: pinned for queued turns,
leased, being written) is parked (`park`): it is nobody's load for now, and is asked for again
when room can be made, until its time is up (kv_store/promotions.py).

Speculative reads (the Prefetcher's, ahead of a predicted return) use what demand leaves idle:
one at a time, begun only while no promotion is queued or running, never queued; a demand
promotion asked for meanwhile starts at once, and the speculative read yields the disk to it
(tiers/read_gate.py), so it is delayed by at most the few chunks that read has in flight (all of
that read when it is of the same session: the demand takes it over)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

from kv_store.tiers.bandwidth import BandwidthMeter


class Promoter:
    def __init__(self, concurrency: int, meter: BandwidthMeter, cap_rate: float = 0.0):
        self.concurrency = max(concurrency, 1)
        self.meter = meter
        self.cap_rate = cap_rate
        self._queued: OrderedDict[str, int] = OrderedDict()  # demand: session -> bytes, FIFO
        self._prepared: OrderedDict[str, int] = OrderedDict()  # behind every demand load
        self._running: dict[str, int] = {}
        self._speculative: tuple[str, int] | None = None  # the one speculative read in flight
        self._landed: dict[str, int] = {}  # running, end first: session -> first token landed
        self._announced: set[str] = set()  # asked for as prepared, until loaded (end first)
        # no room yet: session -> (bytes, prepared, until when it may wait), oldest first
        self._parked: OrderedDict[str, tuple[int, bool, float]] = OrderedDict()
        self.on_idle: Callable[[], None] = lambda: None  # called when the last load finishes
        self._cond = threading.Condition()
        self._closed = False
        self._threads: list[threading.Thread] = []

    def start(self, load: Callable[[str, bool], None]) -> None:
        """Run loads with `load(session_id, prepared)` (the store's parts know the promoter
        before the load path exists, to say which sessions are loading)."""
        self._threads = [threading.Thread(target=self._work, args=(load,), name=f"promote-{i}",
                                          daemon=True) for i in range(self.concurrency)]
        for t in self._threads:
            t.start()

    @property
    def rate(self) -> float:
        """Bytes per second the SSD tier delivers to all loads together."""
        rate = self.meter.rate
        return min(rate, self.cap_rate) if self.cap_rate > 0 else rate

    def request(self, session_id: str, nbytes: int, prepared: bool = False) -> bool:
        """Queue a load (`prepared`: behind the demand loads); False if it is already running
        or queued (a demand request for a queued prepared load moves it up instead)."""
        with self._cond:
            if session_id in self._queued or session_id in self._running:
                return False
            if session_id in self._prepared:
                if prepared:
                    return False
                del self._prepared[session_id]
            (self._prepared if prepared else self._queued)[session_id] = nbytes
            if prepared:
                self._announced.add(session_id)
            self._cond.notify()
            return True

    def hasten(self, session_id: str) -> None:
        """Its turn arrived: a queued prepared load joins the demand loads."""
        with self._cond:
            nbytes = self._prepared.pop(session_id, None)
            if nbytes is not None:
                self._queued[session_id] = nbytes

    def __contains__(self, session_id: str) -> bool:
        with self._cond:
            return (session_id in self._queued or session_id in self._prepared
                    or session_id in self._running)

    def keys(self) -> set[str]:
        """The sessions queued or loading (a speculative read included)."""
        with self._cond:
            spec = {self._speculative[0]} if self._speculative else set()
            return set(self._queued) | set(self._prepared) | set(self._running) | spec

    def park(self, session_id: str, nbytes: int, prepared: bool, until: float) -> None:
        """The load found no room: wait for it (a load parked already keeps its deadline)."""
        with self._cond:
            self._parked.setdefault(session_id, (nbytes, prepared, until))

    def unpark(self, session_id: str, prepared_only: bool = False) -> None:
        with self._cond:
            entry = self._parked.get(session_id)
            if entry is not None and (entry[1] or not prepared_only):
                del self._parked[session_id]

    def is_parked(self, session_id: str) -> bool:
        """Waiting for room, and not queued or running again meanwhile."""
        with self._cond:
            return session_id in self._parked and not self._asked(session_id)

    def parked(self) -> list[tuple[str, int, bool, float]]:
        """(session, bytes, prepared, until) of the loads waiting for room, oldest first (not
        those asked for again meanwhile: their load decides)."""
        with self._cond:
            return [(sid, *entry) for sid, entry in self._parked.items()
                    if not self._asked(sid)]

    def _asked(self, session_id: str) -> bool:
        return (session_id in self._queued or session_id in self._prepared
                or session_id in self._running)

    def landed(self, session_id: str, from_token: int, bytes_left: int) -> None:
        """A load read end first (end_first.py) has landed tokens from `from_token` on; its
        estimate now counts the `bytes_left` before them."""
        with self._cond:
            if session_id in self._running:
                self._running[session_id] = bytes_left
                self._landed[session_id] = from_token

    def announced(self, session_id: str) -> bool:
        """Whether the load was asked for by a prepare (its turn may have arrived since)."""
        with self._cond:
            return session_id in self._announced

    def landed_from(self, session_id: str) -> int:
        with self._cond:
            return self._landed.get(session_id, 0)

    def begin_speculative(self, session_id: str, nbytes: int) -> bool:
        """Claim the disk for one speculative read: False while a promotion is queued or
        running, or another speculative read is in flight."""
        with self._cond:
            if self._waiting() or self._running or self._speculative or self._closed:
                return False
            self._speculative = (session_id, nbytes)
            return True

    def speculating(self, session_id: str) -> bool:
        """Whether the speculative read in flight is `session_id`'s."""
        with self._cond:
            return self._speculative is not None and self._speculative[0] == session_id

    def end_speculative(self) -> None:
        with self._cond:
            self._speculative = None

    def idle(self) -> bool:
        """No promotion queued or running and no speculative read in flight."""
        with self._cond:
            return not (self._waiting() or self._running or self._speculative)

    def estimate(self, session_id: str, nbytes: int) -> float:
        """Seconds until `session_id` is in DRAM: the bytes of every load ahead of it, and
        its own, at the disk's shared rate (a speculative read yields: not ahead, unless it is
        of this very session). A prepared load's is for when its turn arrives, the one turn that
        waits for it: it then joins the demand loads, behind those queued now."""
        with self._cond:
            ahead = sum(self._running.values())
            if self._speculative is not None and self._speculative[0] == session_id:
                ahead += self._speculative[1]
            for sid, size in self._queued.items():
                if sid == session_id:
                    break
                ahead += size
            own = 0 if session_id in self._running else nbytes
        return (ahead + own) / max(self.rate, 1.0)

    def stats(self) -> tuple[int, int, int]:
        """(queued, running, bytes still to load)."""
        with self._cond:
            return (len(self._queued) + len(self._prepared), len(self._running),
                    sum(self._queued.values()) + sum(self._prepared.values())
                    + sum(self._running.values()))

    def _waiting(self) -> bool:
        return bool(self._queued or self._prepared)

    def _work(self, load: Callable[[str, bool], None]) -> None:
        while True:
            with self._cond:
                while not self._waiting() and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                prepared = not self._queued
                session_id, nbytes = (self._prepared if prepared
                                      else self._queued).popitem(last=False)
                self._running[session_id] = nbytes
            try:
                load(session_id, prepared)
            finally:
                with self._cond:
                    self._running.pop(session_id, None)
                    self._landed.pop(session_id, None)
                    self._announced.discard(session_id)
                    idle = not self._waiting() and not self._running
                if idle:
                    self.on_idle()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._queued.clear()
            self._prepared.clear()
            self._parked.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
