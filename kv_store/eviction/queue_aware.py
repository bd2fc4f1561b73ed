"""Queue-aware LRU (CachedAttention): LRU that never evicts the sessions of the next N queued requests."""
from __future__ import annotations

from itertools import islice
from typing import Iterable

from kv_store.eviction.base import Key
from kv_store.eviction.lru import LruPolicy


class QueueAwarePolicy(LruPolicy):
    name = "queue-aware"

    def __init__(self, lookahead: int = 30) -> None:
        super().__init__()
        self.lookahead = lookahead
        self._protected: frozenset = frozenset()

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        self._protected = frozenset(islice(upcoming, self.lookahead))

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        protected = self._protected | exclude if exclude else self._protected
        return self._heap.peek(protected)
