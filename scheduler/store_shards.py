"""The KV store shards as the scheduler sees them: a consistent-hash ring, and per shard a stub
and an Awareness stream. A session's location, loads and events go to the shard that owns it;
its end to every shard that may hold its KV, now or once it is reachable again (ended_sessions.py)."""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

import grpc

from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.hash_ring import HashRing

from scheduler.awareness import AwarenessClient
from scheduler.ended_sessions import EndedSessions

log = logging.getLogger("bidaw.scheduler")


class StoreShards:
    def __init__(self, client_id: str, on_load_finished: Callable[[str, bool], None],
                 queued_sessions: Callable[[], list[str]]):
        self.client_id = client_id
        self.on_load_finished = on_load_finished
        self.queued_sessions = queued_sessions
        self.ring = HashRing()
        self.ends = EndedSessions()
        self._shards: dict[str, tuple[kv_store_pb2_grpc.KVStoreStub, AwarenessClient]] = {}
        self._lock = threading.Lock()

    def add(self, target: str) -> bool:
        """Join a shard (start its Awareness stream); False if it was already a member."""
        with self._lock:
            if target in self._shards:
                return False
            awareness = AwarenessClient(
                target, self.client_id, on_load_finished=self.on_load_finished,
                queued_sessions=lambda: [s for s in self.queued_sessions()
                                         if self.ring.node_for(s) == target],
                ends=self.ends)
            self.ends.shard_seen(target)
            self._shards[target] = (kv_store_pb2_grpc.KVStoreStub(channel(target)), awareness)
            self.ring.add(target)
        awareness.start()
        return True

    def remove(self, target: str) -> bool:
        with self._lock:
            entry = self._shards.pop(target, None)
            self.ring.remove(target)
        if entry is not None:
            entry[1].stop()
        return entry is not None

    def members(self) -> list[str]:
        with self._lock:
            return sorted(self._shards)

    def _owner(self, session_id: str):
        with self._lock:
            return self._shards.get(self.ring.node_for(session_id))

    def promote(self, session_id: str) -> bool:
        """Ask the owning shard to load a session's KV from SSD into DRAM. True when the store
        will report the load's end (LoadFinished on the Awareness stream); False when there is
        nothing to wait for: it is in DRAM already, or the call failed (the worker will read
        the SSD itself)."""
        try:
            tier = self.promote_tier(session_id)
        except (grpc.RpcError, LookupError) as exc:
            log.warning("promotion of %r failed: %s", session_id, exc)
            return False
        return tier in (common_pb2.TIER_SSD, common_pb2.TIER_LOADING)

    def promote_tier(self, session_id: str, timeout: float = 5.0, announced: bool = False) -> int:
        """The owning shard's Promote: the session's tier when it arrived (TIER_SSD: a load
        started now; TIER_NONE: the shard holds nothing). `announced`: a client's prepare, not
        a queued turn. LookupError with no shard, and the RPC's error when it fails."""
        owner = self._owner(session_id)
        if owner is None:
            raise LookupError("no KV store shard")
        return owner[0].Promote(kv_store_pb2.PromoteRequest(session_id=session_id,
                                                            announced=announced),
                                timeout=timeout).tier

    def location(self, session_id: str) -> kv_store_pb2.SessionLocation | None:
        owner = self._owner(session_id)
        return None if owner is None else owner[1].location(session_id)

    def holds(self, session_id: str, timeout: float = 5.0) -> bool:
        """Whether a shard holds KV of the session: the owner's Awareness view, else the
        owner's own answer (the view lags a write by the stream's delay: a turn that has just
        saved its KV may not be in it yet), else another shard's view (an earlier owner: the
        ring changed since the KV was written). False when no shard could say."""
        owner = self._owner(session_id)
        if owner is None:
            return False
        if owner[1].location(session_id) is not None or self._earlier_owners(session_id):
            return True
        try:
            return owner[0].Lookup(kv_store_pb2.LookupRequest(session_id=session_id),
                                   timeout=timeout).tier != common_pb2.TIER_NONE
        except grpc.RpcError as exc:
            log.warning("lookup of %r failed: %s", session_id, exc.code())
            return False

    def _earlier_owners(self, session_id: str) -> list[AwarenessClient]:
        """The Awareness streams of the shards, other than the owner, that say they hold KV
        of the session: it was written there before a shard joined or left moved it."""
        with self._lock:
            owner = self.ring.node_for(session_id)
            others = [a for t, (_, a) in self._shards.items() if t != owner]
        return [a for a in others if a.location(session_id) is not None]

    def tier(self, session_id: str) -> int:
        owner = self._owner(session_id)
        return common_pb2.TIER_NONE if owner is None else owner[1].tier(session_id)

    def arrival(self, session_id: str) -> None:
        self.ends.begun(session_id)  # a session of an ended one's name: its KV is new
        owner = self._owner(session_id)
        if owner is not None:
            owner[1].arrival(session_id)

    def turn_complete(self, session_id: str, answer_tokens: int) -> None:
        owner = self._owner(session_id)
        if owner is not None:
            owner[1].turn_complete(session_id, answer_tokens)

    def session_end(self, session_id: str, wait_s: float = 0.0) -> None:
        """Tell the owning shard the session is over, and every earlier owner still holding KV
        of it (a shard that joined or left since moved it: that copy would be found again once
        the ring moves back); with `wait_s`, wait up to that long in all for those connected
        to say it is gone. Owed until confirmed (told again when its stream is back, or its
        snapshot lists the session) to each of them that did not, and to every shard that is
        out of reach now: a member whose stream is down, an address that left membership."""
        owner = self._owner(session_id)
        streams = [] if owner is None else [owner[1], *self._earlier_owners(session_id)]
        holding = {a.target for a in streams if a.location(session_id) is not None}
        pending = [(a, a.session_end(session_id, confirm=wait_s > 0 and a.connected.is_set()))
                   for a in streams]
        deadline = time.monotonic() + wait_s
        for awareness, gone in pending:
            if gone is not None:
                gone.wait(max(deadline - time.monotonic(), 0.0))
            awareness.ended(session_id)
        with self._lock:
            reached = {t for t, (_, a) in self._shards.items() if a.connected.is_set()}
        told = {a.target for a, gone in pending if gone is not None and gone.is_set()}
        owed = {a.target for a, gone in pending  # it held KV of it, or we waited in vain
                if a.target not in told and (a.target in holding or gone is not None)}
        self.ends.ended(session_id, owed | (set(self.ends.shards()) - reached - told))

    def sessions_under(self, prefix: str) -> set[str]:
        """Every session whose id begins with `prefix` that a shard says it holds KV of."""
        with self._lock:
            streams = [a for _, a in self._shards.values()]
        return {s for a in streams for s in a.sessions_under(prefix)}

    def sessions_known(self) -> int:
        with self._lock:
            return sum(len(a.locations) for _, a in self._shards.values())

    def all_connected(self) -> bool:
        with self._lock:
            return bool(self._shards) and all(a.connected.is_set()
                                              for _, a in self._shards.values())

    def stop(self) -> None:
        for target in self.members():
            self.remove(target)
