"""What the two answer-length policies (bidaw, bidaw-size) share: entry bookkeeping in order of
entry, the protected look-ahead of queued sessions, recording an answer on the session, and the
learned chance that a session with one turn so far comes back (ReturnModel), which brings such a
session's stale deadline forward: one-shot traffic goes first once the data says it does not
return. Subclasses keep `_sessions` (a SessionRegistry of objects with `turns` and
`awaiting_second`) and implement `_access` and `_rank` (using `_stale_idle`)."""
from __future__ import annotations

from itertools import islice
from typing import Iterable

from kv_store.eviction.base import EvictionPolicy, Key
from kv_store.eviction.return_model import ReturnModel
from kv_store.eviction.think_time_model import GapStats

SAME_TURN_S = 0.5


class AnswerRankedPolicy(EvictionPolicy):
    def __init__(self, protect_queue: int, return_horizon_s: float | None = 600.0) -> None:
        # None: every session counts as returning (the paper's policies, an ablation).
        self.returns = None if return_horizon_s is None else ReturnModel(return_horizon_s)
        self._victim: Key | None = None  # the latest victim: its removal is an eviction
        self._entered: dict[Key, int] = {}  # key -> order of entry (ties: earlier first)
        self._seq = 0
        self._protect = protect_queue
        self._protected: frozenset = frozenset()

    def admit(self, key: Key, size: int, now: float) -> None:
        self._seq += 1
        self._entered[key] = self._seq
        self._note_return(key, now)
        self._access(key, size, now)

    def touch(self, key: Key, size: int, now: float) -> None:
        if key not in self._entered:
            self.admit(key, size, now)
            return
        self._note_return(key, now)
        self._access(key, size, now)

    def observe_queue(self, upcoming: Iterable[Key], now: float) -> None:
        if self._protect:
            self._protected = frozenset(islice(upcoming, self._protect))

    def _note_answer(self, key: Key, answer_tokens: int, now: float):
        """Record the answer on the session (created if new); returns the session."""
        s = self._sessions.get(key) or self._sessions.touch(key, now, self.__contains__)
        s.answer = answer_tokens
        s.last = now if s.last is None else max(s.last, now)
        s.turns += 1
        if s.turns == 1 and self.returns is not None:
            s.awaiting_second = True
            self.returns.started(key, now)
        return s

    def _note_return(self, key: Key, now: float) -> None:
        """An access: a session waiting for its second turn has it now (unless it comes within
        `SAME_TURN_S` of the answer: the store's save of that turn racing its completion event)."""
        s = self._sessions.get(key)
        if s is not None and s.awaiting_second and now - s.last >= SAME_TURN_S:
            s.awaiting_second = False
            self.returns.returned(key, now)

    def _chose(self, key: Key | None) -> Key | None:
        """Subclasses' `victim` returns through here."""
        self._victim = key
        return key

    def _note_removal(self, key: Key) -> None:
        """`key` leaves the tier: a session freed rather than evicted has ended, so the return
        model does not learn from it (with an end oracle one-shots would else look common)."""
        if key != self._victim and self.returns is not None:
            self.returns.forget(key)

    def _stale_idle(self, s, stats: GapStats, quantile: float) -> float:
        """Idle seconds (before the session's own pace) after which `s` counts as ended: the
        `quantile` of its think time, i.e. once the chance that its next turn is still to come is
        down to 1 - quantile. For a session with one turn so far that chance is
        p·S(x) / (p·S(x) + 1 - p) after idling x (p: the learned return probability, S(x): the
        chance a think time exceeds x), so the same threshold comes sooner; it binds only once
        many sessions do not come back (p = 0.94 on the paper's trace: never)."""
        idle = stats.quantiles[quantile]
        if s.awaiting_second and self.returns is not None:
            p, pi = self.returns.probability(), 1.0 - quantile
            tail = 1.0 if p <= pi else pi * (1.0 - p) / ((1.0 - pi) * p)
            idle = min(idle, stats.gap_at_survival(tail))
        return idle

    def _access(self, key: Key, size: int, now: float) -> None:  # pragma: no cover
        raise NotImplementedError
