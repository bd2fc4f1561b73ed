"""The compute side of the Awareness stream: one long-lived bidirectional stream to the store.

Store -> us: every session's KV location and size (a snapshot on each connection, then changes)
and finished loads. A load's estimate is the store's when it said so: `location` gives what is
left of it now (the disk has been reading since), so a turn that arrives mid-load is not told
the whole load is still to come. Us -> store: arrivals, turn completions with answer lengths,
session ends.
The stream reconnects with backoff; on reconnection the store's snapshot replaces our map and we
re-announce the turns still queued, so both sides resynchronise after either restarts. A session
the snapshot lists that ended while the store was away (ended_sessions.py) is not taken into the
map: the store is told to drop it, there and then.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

import grpc

from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.outage import Outage

from scheduler.ended_sessions import EndedSessions

log = logging.getLogger("bidaw.scheduler")


class AwarenessClient:
    def __init__(self, target: str, client_id: str,
                 on_load_finished: Callable[[str, bool], None] = lambda s, ok: None,
                 queued_sessions: Callable[[], list[str]] = lambda: [],
                 ends: EndedSessions | None = None):
        self.target = target
        self.ends = ends  # session ends this store may not have heard of
        self.client_id = client_id
        self.on_load_finished = on_load_finished
        self.queued_sessions = queued_sessions
        self.locations: dict[str, kv_store_pb2.SessionLocation] = {}
        self._said_at: dict[str, float] = {}  # session -> when its location arrived
        self._gone: dict[str, threading.Event] = {}  # ended sessions whose KV we wait to go
        self.connected = threading.Event()
        self._outbox: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="awareness", daemon=True)

    def start(self) -> "AwarenessClient":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._outbox.put(None)
        self._thread.join(timeout=5)

    # -- what the scheduler sends -----------------------------------------------------------

    def arrival(self, session_id: str) -> None:
        self._outbox.put(kv_store_pb2.ComputeEvent(
            arrival=kv_store_pb2.Arrival(session_id=session_id)))

    def turn_complete(self, session_id: str, answer_tokens: int) -> None:
        self._outbox.put(kv_store_pb2.ComputeEvent(turn_complete=kv_store_pb2.TurnComplete(
            session_id=session_id, answer_tokens=answer_tokens)))

    def session_end(self, session_id: str, confirm: bool = False) -> threading.Event | None:
        """Gone as far as we are concerned; the store's word follows. With `confirm`, an event
        set once the store says the session's KV is gone (a location of tier NONE, or a
        snapshot without it); the caller waits on it, then calls `ended(session_id)`."""
        gone = threading.Event() if confirm else None
        with self._lock:
            self.locations.pop(session_id, None)
            self._said_at.pop(session_id, None)
            if gone is not None:
                self._gone[session_id] = gone
        self._send_end(session_id)
        return gone

    def _send_end(self, session_id: str) -> None:
        self._outbox.put(kv_store_pb2.ComputeEvent(
            session_end=kv_store_pb2.SessionEnd(session_id=session_id)))

    def ended(self, session_id: str) -> None:
        """The caller of `session_end(confirm=True)` waits no more."""
        with self._lock:
            self._gone.pop(session_id, None)

    def sessions_under(self, prefix: str) -> list[str]:
        """The sessions this store says it holds KV of whose ids begin with `prefix`."""
        with self._lock:
            return [s for s in self.locations if s.startswith(prefix)]

    def tier(self, session_id: str) -> int:
        with self._lock:
            loc = self.locations.get(session_id)
        return common_pb2.TIER_NONE if loc is None else loc.tier

    def location(self, session_id: str) -> kv_store_pb2.SessionLocation | None:
        """The session's location; a load's estimate less the time since the store gave it."""
        with self._lock:
            loc = self.locations.get(session_id)
            said_at = self._said_at.get(session_id)
        if loc is None or loc.tier != common_pb2.TIER_LOADING or said_at is None:
            return loc
        aged = kv_store_pb2.SessionLocation()
        aged.CopyFrom(loc)
        aged.load_estimate_s = max(loc.load_estimate_s - (time.monotonic() - said_at), 0.0)
        return aged

    # -- the stream -------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.2
        outage = Outage(f"awareness stream to {self.target}")
        while not self._stop.is_set():
            try:
                with channel(self.target) as ch:
                    stub = kv_store_pb2_grpc.KVStoreStub(ch)
                    for event in stub.Awareness(self._requests()):
                        backoff = 0.2
                        outage.ended()
                        self._handle(event)
            except grpc.RpcError as exc:
                if not self._stop.is_set():
                    outage.failed(exc.code().name)
            self.connected.clear()
            self._outbox.put(None)  # ends the old request iterator if it still waits
            self._stop.wait(backoff)
            backoff = min(backoff * 2, 5.0)

    def _requests(self):
        # What piled up while disconnected: keep completions (answer lengths are the store's
        # signal); drop arrivals, which the re-announcement of the queue below replaces.
        backlog = []
        while not self._outbox.empty():
            event = self._outbox.get_nowait()
            if event is not None and event.WhichOneof("kind") != "arrival":
                backlog.append(event)
        yield kv_store_pb2.ComputeEvent(hello=kv_store_pb2.Hello(client_id=self.client_id))
        for session_id in self.queued_sessions():  # soonest first
            yield kv_store_pb2.ComputeEvent(arrival=kv_store_pb2.Arrival(session_id=session_id))
        yield from backlog
        while True:
            event = self._outbox.get()
            if event is None or self._stop.is_set():
                return
            yield event

    def _handle(self, event: kv_store_pb2.StoreEvent) -> None:
        kind = event.WhichOneof("kind")
        if kind == "snapshot":
            now = time.monotonic()
            listed = {loc.session_id: loc for loc in event.snapshot.sessions}
            drop = [] if self.ends is None else self.ends.on_snapshot(self.target, listed)
            with self._lock:
                for session_id, gone in self._gone.items():
                    if session_id not in listed:
                        gone.set()
                for session_id in drop:  # ended while this store was away: never served
                    del listed[session_id]
                self.locations = listed
                self._said_at = dict.fromkeys(self.locations, now)
            for session_id in drop:
                self._send_end(session_id)
            if drop:
                log.info("KV store %s holds %d sessions ended while it was away: told to "
                         "drop them", self.target, len(drop))
            self.connected.set()
        elif kind == "location":
            loc = event.location
            with self._lock:
                if loc.tier == common_pb2.TIER_NONE:
                    if self.ends is not None:
                        self.ends.confirmed(self.target, loc.session_id)
                    self.locations.pop(loc.session_id, None)
                    self._said_at.pop(loc.session_id, None)
                    if loc.session_id in self._gone:
                        self._gone[loc.session_id].set()
                else:
                    self.locations[loc.session_id] = loc
                    self._said_at[loc.session_id] = time.monotonic()
        elif kind == "load_finished":
            self.on_load_finished(event.load_finished.session_id, event.load_finished.ok)

