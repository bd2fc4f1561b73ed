"""How likely a conversation that has had k turns is to have another, learned online.

Promotion reads a session's KV back before its user returns; without an end oracle many
evicted sessions have simply ended, and a read for them is wasted (and pushes out KV that is
then read back). The think-time model says *when* a returning user comes back; this says
*whether*: per bucket of turns so far (1, 2, 3, 4, 5-6, 7-9, 10-14, 15-22, 23-34, 35+), the
decayed fraction of sessions whose next turn came within `end_after_s` of their latest answer.
A finished turn opens a pending entry; the next turn counts 1, `end_after_s` idle counts 0 (a
later return is then a new start, never counted twice); a session whose end is announced (its
KV freed, not evicted: the end oracle) is forgotten uncounted. Counts start from a prior
(`prior` with weight `prior_weight`) and decay with a half-life of about `window` resolved
sessions per bucket.

Given the latest answer's length (`answer`, in tokens) and the user's pace (log of its gaps
over the think-time model's median, as bidaw-size keeps it), p is that of the (turns, answer
bucket, pace class) cell, shrunk towards its turns bucket's (`answer_shrink` sessions' worth of
it). On the paper's trace a conversation ends after 14-18% of the answers under 8 tokens (a
refusal or an error, presumably) and after 1.5-4.6% of the others; among those others, after
0.4-0.6% of the turns of users faster than the median (pace < -0.2) and 10% of those slower
(pace > 0.2): the silence that ends a conversation starts as a slowing down.

`chance(turns, survival)`: P(another turn | k turns, idle so far) = p·S / (p·S + 1 - p), with
p the bucket's estimate and S the chance that a returning user's think time exceeds the idle
time (from the caller's think-time model): the longer the silence, the likelier the end.

Pure and clock-free: time is an argument; memory bounded by `max_pending`; O(1) amortised.
"""
from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from typing import Hashable

from kv_store.eviction.think_time_model import N_ANSWER_BUCKETS, answer_bucket

Key = Hashable

# Lower edges of the turns-so-far buckets (roughly geometric: the hazard changes slowly later).
TURN_EDGES: tuple[int, ...] = (1, 2, 3, 4, 5, 7, 10, 15, 23, 35)


# Pace classes (log of the user's gaps over the model's median): faster than usual .. slower.
PACE_EDGES: tuple[float, ...] = (-0.2, 0.0, 0.2)


def turn_bucket(turns: int) -> int:
    return max(bisect_right(TURN_EDGES, turns) - 1, 0)


class SessionEndModel:
    def __init__(self, end_after_s: float = 600.0, window: float = 500.0, prior: float = 0.9,
                 prior_weight: float = 10.0, max_pending: int = 200_000,
                 answer_shrink: float | None = 20.0,
                 pace_edges: tuple[float, ...] | None = PACE_EDGES) -> None:
        if end_after_s <= 0 or window <= 0 or not 0.0 <= prior <= 1.0 or prior_weight < 0:
            raise ValueError("SessionEndModel needs end_after_s > 0, window > 0, prior in [0, 1] "
                             f"and prior_weight >= 0 (got {end_after_s}, {window}, {prior}, "
                             f"{prior_weight})")
        self.end_after_s = end_after_s
        self.max_pending = max_pending
        self.answer_shrink = answer_shrink  # None: per turns only (neither answer nor pace)
        self.pace_edges = pace_edges or ()     # empty: the answer alone
        self._kinds = N_ANSWER_BUCKETS * (len(self.pace_edges) + 1)
        self._gamma = 1.0 - 1.0 / window
        n = len(TURN_EDGES)
        self._back = [prior * prior_weight] * n
        self._total = [float(prior_weight)] * n
        # per turns bucket, one cell per (answer bucket, pace class): counted from zero, and
        # shrunk towards the turns bucket when read (a cell seen rarely says what its bucket does)
        self._cell_back = [[0.0] * self._kinds for _ in range(n)]
        self._cell_total = [[0.0] * self._kinds for _ in range(n)]
        # key -> (t, turns bucket, cell or -1)
        self._pending: OrderedDict[Key, tuple[float, int, int]] = OrderedDict()

    def finished(self, key: Key, turns: int, now: float, answer: int | None = None,
                 pace: float = 0.0) -> None:
        """`key` finished its `turns`-th turn at `now` (its answer, of `answer` tokens, is out;
        its user's `pace`: log of its gaps over the think-time model's median)."""
        self._expire(now)
        self._pending[key] = (now, turn_bucket(turns), self._kind(answer, pace))
        self._pending.move_to_end(key)
        while len(self._pending) > self.max_pending:
            self._pending.popitem(last=False)

    def returned(self, key: Key, now: float) -> None:
        """`key`'s next turn came at `now` (ignored unless it is pending)."""
        self._expire(now)
        entry = self._pending.pop(key, None)
        if entry is not None:
            self._count(entry[1], entry[2], 1.0)

    def forget(self, key: Key) -> None:
        """Stop following `key` uncounted (its end was announced: it needs no guess)."""
        self._pending.pop(key, None)

    def probability(self, turns: int, answer: int | None = None, pace: float = 0.0) -> float:
        """P(another turn within `end_after_s` | `turns` turns so far, and if `answer` is
        given, the latest answer of `answer` tokens and the user's `pace`)."""
        b = turn_bucket(turns)
        p = self._back[b] / self._total[b] if self._total[b] > 0 else 1.0
        a = self._kind(answer, pace)
        if a < 0:
            return p
        w = self.answer_shrink
        return (self._cell_back[b][a] + w * p) / (self._cell_total[b][a] + w)

    def chance(self, turns: int, survival: float, answer: int | None = None,
               pace: float = 0.0) -> float:
        """P(another turn | `turns` so far (and the latest answer's `answer` tokens, the user's
        `pace`), silent for an idle time a returning user's think time exceeds with probability
        `survival`)."""
        p = self.probability(turns, answer, pace)
        ps = p * min(max(survival, 0.0), 1.0)
        denom = ps + 1.0 - p
        return ps / denom if denom > 0 else 0.0

    def __len__(self) -> int:
        return len(self._pending)

    def _expire(self, now: float) -> None:
        limit = now - self.end_after_s
        pending = self._pending
        while pending:
            key, (t, b, a) = next(iter(pending.items()))
            if t >= limit:
                break
            del pending[key]
            self._count(b, a, 0.0)

    def _kind(self, answer: int | None, pace: float) -> int:
        """The cell of a latest answer and pace within a turns bucket (-1: none)."""
        if answer is None or self.answer_shrink is None:
            return -1
        pace_class = bisect_right(self.pace_edges, pace)
        return answer_bucket(answer) * (len(self.pace_edges) + 1) + pace_class

    def _count(self, b: int, a: int, back: float) -> None:
        g = self._gamma
        self._back[b] = self._back[b] * g + back
        self._total[b] = self._total[b] * g + 1.0
        if a >= 0:  # the cell decays with its own resolutions (as the turns bucket does)
            self._cell_back[b][a] = self._cell_back[b][a] * g + back
            self._cell_total[b][a] = self._cell_total[b][a] * g + 1.0
