"""How likely a session that has finished one turn is to come back for a second.

Many chat clients send one-shot requests (a "hi", a benchmark's single prompt) and never return.
Before its second turn such a session looks exactly like a new conversation, so answer-based
policies would keep it as long as a real one. This model learns, online, the fraction of sessions
whose second turn came within `horizon_s` of their first: a first turn opens a pending entry; a
return inside the horizon counts 1, the horizon passing without one counts 0 (a later return is
then a new start for the policy's purposes, never counted twice). Counts decay with a half-life
of about `window` resolved sessions, so the estimate follows the traffic mix, and start from a
prior (`prior` with weight `prior_weight`: 'sessions come back', today's behaviour, until data
says otherwise). A session whose end is announced (its KV freed, not evicted) is forgotten
uncounted: the estimate is about the sessions a policy still has to guess about.

Pure and clock-free: time is an argument. Memory is bounded: entries live at most `horizon_s`,
and beyond `max_pending` the oldest are dropped uncounted. Every call is O(1) amortised.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Hashable

Key = Hashable


class ReturnModel:
    def __init__(self, horizon_s: float = 600.0, window: float = 2000.0, prior: float = 1.0,
                 prior_weight: float = 20.0, max_pending: int = 100_000) -> None:
        if horizon_s <= 0 or window <= 0 or not 0.0 <= prior <= 1.0 or prior_weight < 0:
            raise ValueError("ReturnModel needs horizon_s > 0, window > 0, prior in [0, 1] and "
                             f"prior_weight >= 0 (got {horizon_s}, {window}, {prior}, {prior_weight})")
        self.horizon_s = horizon_s
        self.max_pending = max_pending
        self._gamma = 1.0 - 1.0 / window
        self._back = prior * prior_weight
        self._total = float(prior_weight)
        self._default = prior
        self._pending: OrderedDict[Key, float] = OrderedDict()  # key -> first turn, oldest first
        self.resolved = 0

    def started(self, key: Key, now: float) -> None:
        """`key` finished its first turn at `now`."""
        self._expire(now)
        self._pending[key] = now
        self._pending.move_to_end(key)
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)

    def returned(self, key: Key, now: float) -> None:
        """`key`, after one turn, came back at `now` (ignored unless it is pending)."""
        self._expire(now)
        if self._pending.pop(key, None) is not None:
            self._count(1.0)

    def forget(self, key: Key) -> None:
        """Stop following `key` without counting it (its end was announced: it needs no guess)."""
        self._pending.pop(key, None)

    def probability(self) -> float:
        """P(a second turn within the horizon | one turn so far)."""
        return self._back / self._total if self._total > 0 else self._default

    def __len__(self) -> int:
        """Sessions waiting to be resolved."""
        return len(self._pending)

    def _expire(self, now: float) -> None:
        limit = now - self.horizon_s
        pending = self._pending
        while pending:
            key, t = next(iter(pending.items()))
            if t >= limit:
                break
            del pending[key]
            self._count(0.0)

    def _count(self, back: float) -> None:
        g = self._gamma
        self._back = self._back * g + back
        self._total = self._total * g + 1.0
        self.resolved += 1
