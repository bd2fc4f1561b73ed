"""Online weighted reuse distance: bytes of KV of *other* sessions accessed between two accesses
of a session, each other session counted once at its latest size (as the paper defines it).

A Fenwick tree over access positions holds, for every session, its latest size at its latest
position; a session's reuse distance is then the weight strictly after its previous position.
O(log n) per access. Positions are renumbered when the tree fills; sessions idle past the last
`horizon` distinct sessions are forgotten (their next distance is reported as None: unknown, and
larger than anything the tree still covers).
"""
from __future__ import annotations

from typing import Hashable

Key = Hashable


class ReuseDistanceMeter:
    def __init__(self, horizon: int = 1 << 14) -> None:
        self.horizon = horizon
        self._cap = 2 * horizon
        self._tree = [0] * (self._cap + 1)
        self._pos: dict[Key, int] = {}       # session -> its latest position (1-based)
        self._weight: dict[Key, int] = {}    # session -> size stored at that position
        self._next = 1
        self._total = 0

    def access(self, key: Key, size: int) -> int | None:
        """Record an access of `key` (now `size` bytes); return its reuse distance, None if first/unknown."""
        if self._next > self._cap:
            self._compact()
        rd = None
        tree, n = self._tree, self._cap
        prev = self._pos.get(key)
        if prev is not None:
            i, acc = prev, 0
            while i > 0:  # prefix sum up to prev (inlined: this is the hot path)
                acc += tree[i]
                i -= i & -i
            rd = self._total - acc
            w = self._weight[key]
            if w:
                i = prev
                while i <= n:
                    tree[i] -= w
                    i += i & -i
            self._total -= w
        p = self._next
        self._next += 1
        self._pos[key] = p
        self._weight[key] = size
        if size:
            i = p
            while i <= n:
                tree[i] += size
                i += i & -i
        self._total += size
        return rd

    def _compact(self) -> None:
        """Renumber the latest positions 1..m in order, keeping the most recent `horizon`."""
        items = sorted(self._pos.items(), key=lambda kv: kv[1])[-self.horizon:]
        self._tree = [0] * (self._cap + 1)
        self._pos, old_w = {}, self._weight
        self._weight = {}
        self._total = 0
        for i, (key, _) in enumerate(items, start=1):
            w = old_w[key]
            self._pos[key] = i
            self._weight[key] = w
            self._total += w
        # Build the Fenwick tree in O(m).
        tree = self._tree
        for key, i in self._pos.items():
            tree[i] += self._weight[key]
        for i in range(1, self._cap + 1):
            j = i + (i & -i)
            if j <= self._cap:
                tree[j] += tree[i]
        self._next = len(items) + 1

    def __len__(self) -> int:
        return len(self._pos)
