"""The interface every scheduling queue implements, and the bookkeeping they share."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Hashable

from scheduler.policy.arrival_order import ArrivalOrder
from scheduler.policy.request import (KV_DRAM, KV_LOADING, KV_LOCATIONS, KV_NONE, KV_SSD,
                                      LOADING, READY, WAITING, QueuedRequest)

_STATE_OF_LOCATION = {KV_NONE: READY, KV_DRAM: READY, KV_SSD: WAITING, KV_LOADING: LOADING}


class RequestQueue(ABC):
    """Queued requests; decides which SSD load to start and which request to dispatch next."""

    name = "base"

    def __init__(self, max_concurrent_loads: int = 2) -> None:
        if max_concurrent_loads < 1:
            raise ValueError("max_concurrent_loads must be >= 1")
        self.max_concurrent_loads = max_concurrent_loads
        self._by_id: dict[Hashable, QueuedRequest] = {}
        self._order = ArrivalOrder()
        self._counts = {READY: 0, WAITING: 0, LOADING: 0}

    # ---- the verbs -------------------------------------------------------------------------
    def add(self, request_id: Hashable, session_id: Hashable, arrival_seq: int,
            arrival_time: float, kv_location: str, kv_bytes: int) -> QueuedRequest:
        if request_id in self._by_id:
            raise ValueError(f"request {request_id!r} is already queued")
        if kv_location not in KV_LOCATIONS:
            raise ValueError(f"unknown kv_location {kv_location!r}; known: {KV_LOCATIONS}")
        state = self._state_on_arrival(kv_location)
        req = QueuedRequest(request_id, session_id, arrival_seq, arrival_time, kv_location,
                            int(kv_bytes), state)
        self._order.append(req)  # raises on a non-increasing seq, before any state changes
        self._by_id[request_id] = req
        self._counts[state] += 1
        self._on_add(req)
        return req

    def next_load(self, now: float, loads_in_flight: int) -> QueuedRequest | None:
        """The SSD load to start now (its state becomes LOADING), or None.

        None when `loads_in_flight` (the caller's count) already reaches max_concurrent_loads.
        Call repeatedly until None to fill every free load slot.
        """
        if loads_in_flight >= self.max_concurrent_loads or self._counts[WAITING] == 0:
            return None
        req = self._pick_load(now)
        if req is not None:
            self._set_state(req, LOADING)
        return req

    def load_finished(self, request_id: Hashable) -> QueuedRequest | None:
        """The KV of a LOADING request is now in DRAM: it becomes READY at its arrival position.

        Unknown ids (removed meanwhile) and requests that were not loading are ignored (None).
        """
        req = self._by_id.get(request_id)
        if req is None or req.state != LOADING:
            return None
        self._set_state(req, READY)
        self._on_ready(req)
        return req

    @abstractmethod
    def peek_ready(self) -> QueuedRequest | None:
        """The request `pop_ready` would return, without removing it."""

    def pop_ready(self) -> QueuedRequest | None:
        """Remove and return the request to dispatch next, or None if none may run now."""
        req = self.peek_ready()
        if req is not None:
            self._drop(req)
        return req

    def kv_evicted(self, request_id: Hashable, kv_bytes: int) -> QueuedRequest | None:
        """A READY request's KV left DRAM before dispatch (it held no lease): it needs a load again.

        It keeps its arrival position and becomes WAITING (kv_location "ssd", `kv_bytes` to load).
        Requests that are not READY, and every request of a queue that does not look at where
        KV is (FCFSQueue(ssd_aware=False)), are ignored (None).
        """
        req = self._by_id.get(request_id)
        if req is None or req.state != READY or self._state_on_arrival(KV_SSD) == READY:
            return None
        req.kv_location = KV_SSD
        req.kv_bytes = int(kv_bytes)
        self._set_state(req, WAITING)  # its ready-queue entry goes stale (skipped lazily)
        self._on_demote(req)
        self._on_add(req)
        return req

    def remove(self, request_id: Hashable) -> QueuedRequest | None:
        """Cancel a queued request in any state (a LOADING one's load is the caller's to drop)."""
        req = self._by_id.get(request_id)
        if req is not None:
            self._drop(req)
        return req

    def upcoming(self, n: int) -> list[Hashable]:
        """Sessions of the first `n` queued requests in arrival order (the look-ahead window)."""
        return [r.session_id for r in self._order.iter_first(n)]

    # ---- inspection ------------------------------------------------------------------------
    def get(self, request_id: Hashable) -> QueuedRequest | None:
        return self._by_id.get(request_id)

    def lengths(self) -> dict[str, int]:
        """How many queued requests are ready, waiting for a load, and loading."""
        return dict(self._counts)

    @property
    def ready_len(self) -> int:
        return self._counts[READY]

    @property
    def waiting_len(self) -> int:
        return self._counts[WAITING]

    @property
    def loading_len(self) -> int:
        return self._counts[LOADING]

    def __len__(self) -> int:
        return len(self._by_id)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._by_id

    # ---- for subclasses --------------------------------------------------------------------
    def _state_on_arrival(self, kv_location: str) -> str:
        return _STATE_OF_LOCATION[kv_location]

    @abstractmethod
    def _on_add(self, req: QueuedRequest) -> None: ...

    @abstractmethod
    def _pick_load(self, now: float) -> QueuedRequest | None:
        """A WAITING request to load next, taken out of the subclass's waiting structure."""

    def _on_ready(self, req: QueuedRequest) -> None:
        """`req` just became READY after its load."""

    def _on_demote(self, req: QueuedRequest) -> None:
        """`req` went from READY back to WAITING."""

    def _on_drop(self, req: QueuedRequest) -> None:
        """`req` is leaving the queue (dispatched or removed); its state is still the old one."""

    def _set_state(self, req: QueuedRequest, state: str) -> None:
        self._counts[req.state] -= 1
        self._counts[state] += 1
        req.state = state

    def _drop(self, req: QueuedRequest) -> None:
        self._on_drop(req)
        self._counts[req.state] -= 1
        del self._by_id[req.request_id]
        self._order.discard(req)
