"""Which KV store shard holds a session: the worker's side of the consistent-hash ring.

The scheduler sends the current shard list with every turn; the worker hashes the session onto
it exactly as the scheduler does (services/runtime/hash_ring.py), with one client per shard, reused.
"""
from __future__ import annotations

import threading

from services.runtime.hash_ring import HashRing

from compute_worker.kv_client import KVClient


class KVShards:
    def __init__(self, default: str = ""):
        self.default = [t.strip() for t in default.split(",") if t.strip()]
        self._clients: dict[str, KVClient] = {}
        self._rings: dict[tuple[str, ...], HashRing] = {}
        self._lock = threading.Lock()

    def client_for(self, session_id: str, shards: list[str] | None = None) -> KVClient | None:
        """The client of the shard owning `session_id` (None: no store, recompute)."""
        members = tuple(sorted(shards or self.default))
        if not members:
            return None
        with self._lock:
            ring = self._rings.get(members)
            if ring is None:
                ring = self._rings[members] = HashRing(list(members))
                if len(self._rings) > 16:  # membership changes are rare; keep a few rings
                    self._rings.pop(next(iter(self._rings)))
            target = ring.node_for(session_id)
            client = self._clients.get(target)
            if client is None:
                client = self._clients[target] = KVClient(target)
            return client
