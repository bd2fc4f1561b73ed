"""What the two answer-length policies (bidaw, bidaw-size) share: entry bookkeeping in order of
entry, the protected look-ahead of queued sessions, and recording an answer on the session.
Subclasses keep `_sessions` (a SessionRegistry) and implement `_access` and `_rank`."""
from __future__ import annotations

from itertools import islice
from typing import Iterable

from kv_store.eviction.base import EvictionPolicy, Key


class AnswerRankedPolicy(EvictionPolicy):
    def __init__(self, protect_queue: int) -> None:
        self._entered: dict[Key, int] = {}  # key -> order of entry (ties: earlier first)
        self._seq = 0
        self._protect = protect_queue
        self._protected: frozenset = frozenset()

    def admit(self, key: Key, size: int, now: float) -> None:
        self._seq += 1
        self._entered[key] = self._seq
        self._access(key, size, now)

    def touch(self, key: Key, size: int, now: float) -> None:
        if key not in self._entered:
            self.admit(key, size, now)
            return
        self._access(key, size, now)

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        if self._protect:
            self._protected = frozenset(islice(upcoming, self._protect))

    def _note_answer(self, key: Key, answer_tokens: int, now: float):
        """Record the answer on the session (created if new); returns the session."""
        s = self._sessions.get(key) or self._sessions.touch(key, now, self.__contains__)
        s.answer = answer_tokens
        s.last = now if s.last is None else max(s.last, now)
        return s

    def _access(self, key: Key, size: int, now: float) -> None:  # pragma: no cover
        raise NotImplementedError
