"""Consistent hashing of sessions onto KV store shards (pure).

The scheduler and every worker build the ring from the same member list and so agree on each
session's shard; adding or removing a shard moves only ~1/n of the sessions (to or from it).
"""
from __future__ import annotations

import bisect
import hashlib


def _point(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


class HashRing:
    def __init__(self, nodes: list[str] | tuple[str, ...] = (), vnodes: int = 64):
        self.vnodes = vnodes
        self._points: list[int] = []
        self._owners: list[str] = []
        self.nodes: set[str] = set()
        for node in nodes:
            self.add(node)

    def add(self, node: str) -> None:
        if node in self.nodes:
            return
        self.nodes.add(node)
        for i in range(self.vnodes):
            point = _point(f"{node}#{i}")
            at = bisect.bisect(self._points, point)
            self._points.insert(at, point)
            self._owners.insert(at, node)

    def remove(self, node: str) -> None:
        if node not in self.nodes:
            return
        self.nodes.discard(node)
        keep = [(p, o) for p, o in zip(self._points, self._owners) if o != node]
        self._points = [p for p, _ in keep]
        self._owners = [o for _, o in keep]

    def node_for(self, key: str) -> str | None:
        """The shard owning `key` (None when the ring is empty)."""
        if not self._points:
            return None
        at = bisect.bisect(self._points, _point(key)) % len(self._points)
        return self._owners[at]

    def __len__(self) -> int:
        return len(self.nodes)
