"""Bidaw-size (beyond the paper): evict the largest expected remaining wait × KV size.

The same answer-length signal as Bidaw, in time instead of reuse-distance buckets. A session that
finished a turn at `last` with an answer of `a` tokens is expected back after the mean think time
for answers of that length (ThinkTimeModel, learned online per answer bucket), scaled by the
user's own reading pace (a decayed mean of how its past gaps compared with the model's median).
Holding a KV of `s` bytes for a remaining wait `w` costs s·w of DRAM-time per hit, so the victim
is the entry with the largest w · s^β. β = `size_exponent` = 0.2 by default: β = 1 maximises the
hit rate but favours small entries so much that the byte hit rate falls below Bidaw's; 0.2 keeps
the byte hit rate at or above Bidaw's and ≥ 96% of the gap to Belady on every case measured
(docs/policies.md has the measurements).

Stale rule: a session idle past a high quantile of its predicted gap has probably ended (a live
system never learns that a conversation is over) and goes first, oldest deadline first. A session
with one turn so far gets there sooner once the learned chance of a second turn is low (one-shot
traffic; ReturnModel, shared with Bidaw in answer_ranked.py).

Per-user fallback (SignalModel): a user whose own gaps are regular or near zero and predict it
better than the answer does (a script, an agent) is predicted from its own gaps instead: kept
while it runs, ended soon after its last turn; its gaps stay out of the population's model.

Where a caller reports its disk's demand reads (`observe_demand_read`), β moves towards
`loaded_size_exponent` as they fill the disk (DemandShare): the bytes read are then the disk's
whatever DRAM keeps, so the turns DRAM serves are all eviction still decides (Mooncake at
1,600 GiB without the end oracle: 47.5 → 55.6%, docs/policies.md). No reports: β stays.

O(log n) decisions: entries sit in one max-heap per size class (classes `1/classes_per_octave`
octave wide) keyed by predicted return time, which orders them by remaining wait at any `now`;
the victim is the best of the class tops (a few dozen), plus one min-heap of stale deadlines.
"""
from __future__ import annotations

import math

from kv_store.eviction.answer_ranked import AnswerRankedPolicy
from kv_store.eviction.base import Key
from kv_store.eviction.disk_share import DemandShare
from kv_store.eviction.lazy_heap import LazyHeap
from kv_store.eviction.session_registry import SessionRegistry
from kv_store.eviction.signal_model import SignalModel, UserSignal
from kv_store.eviction.think_time_model import ThinkTimeModel


class _Session:
    __slots__ = ("last", "answer", "pace", "size", "cls", "t_next", "turns", "awaiting_second",
                 "signal")

    def __init__(self) -> None:
        self.last: float | None = None   # time of the latest access or answer
        self.answer: int | None = None   # tokens of the latest answer
        self.pace = 0.0                  # log(own gap / model median), decayed mean
        self.size = 0
        self.cls = -1
        self.t_next = 0.0
        self.turns = 0                   # answers seen
        self.awaiting_second = False     # one turn so far (its stale deadline may be sooner)
        self.signal = UserSignal()       # does the answer predict this user's return?


class BidawSizePolicy(AnswerRankedPolicy):
    name = "bidaw-size"

    def __init__(self, size_exponent: float = 0.2, stale_quantile: float | None = 0.99,
                 stale_factor: float = 1.0, pace_decay: float = 0.7, classes_per_octave: int = 2,
                 protect_queue: int = 30, return_horizon_s: float | None = 600.0,
                 per_user_signal: bool = True, answer_signal: bool = True,
                 idle_signal: bool = True, loaded_size_exponent: float | None = 0.7,
                 demand_tau_s: float = 300.0) -> None:
        if not (size_exponent >= 0 and 0 <= pace_decay <= 1 and classes_per_octave >= 1
                and stale_factor > 0 and (stale_quantile is None or 0 < stale_quantile < 1)
                and (loaded_size_exponent is None or loaded_size_exponent >= 0)):
            raise ValueError("bidaw-size needs size_exponent >= 0, 0 <= pace_decay <= 1, "
                             "classes_per_octave >= 1, stale_factor > 0, stale_quantile in (0, 1) "
                             "or null and loaded_size_exponent >= 0 or null")
        self.size_exponent = size_exponent
        # β with an idle disk, and towards which it moves as demand reads fill it (None: fixed)
        self.idle_size_exponent = size_exponent
        self.loaded_size_exponent = loaded_size_exponent
        self.demand = DemandShare(demand_tau_s)
        # Per-user fallback where the answer does not predict the return (SignalModel); the
        # last two switch a signal off for the ablation (docs/policies.md): every answer in one
        # bucket; the score from the predicted gap alone, however long the session has idled.
        self.signal = SignalModel() if per_user_signal else None
        self.answer_signal = answer_signal
        self.idle_signal = idle_signal
        self.stale_quantile = stale_quantile
        self.stale_factor = stale_factor
        self.pace_decay = pace_decay  # 1: every user keeps the population's pace (the ablation)
        self.classes_per_octave = classes_per_octave
        self.think = ThinkTimeModel(extra_quantiles=(stale_quantile,))
        self._sessions: SessionRegistry[_Session] = SessionRegistry(_Session)
        self._classes: dict[int, LazyHeap] = {}
        self._stale = LazyHeap()
        super().__init__(protect_queue, return_horizon_s)

    # ---- the interface --------------------------------------------------------------------
    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        s = self._note_answer(key, answer_tokens if self.answer_signal else 0, now)
        if key in self._entered:
            self._rank(key, s)

    def observe_demand_read(self, start: float, end: float) -> None:
        """The caller's disk served a demand read from `start` to `end`. The fuller the disk
        with demand reads, the more the ranking favours small entries: the disk's bytes are
        spoken for either way, the turns DRAM serves are not."""
        self.demand.read(start, end)
        hi = self.loaded_size_exponent
        if hi is not None:
            lo = self.idle_size_exponent
            self.size_exponent = lo + (hi - lo) * self.demand.share(end)

    def remove(self, key: Key) -> None:
        self._note_removal(key)
        if self._entered.pop(key, None) is None:
            return
        self._stale.discard(key)
        s = self._sessions.get(key)
        if s is not None and s.cls in self._classes:
            heap = self._classes[s.cls]
            heap.discard(key)
            if not len(heap):
                del self._classes[s.cls]

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        protected = self._protected | exclude if exclude else self._protected
        if self.stale_quantile is not None:
            k = self._stale.peek(protected)
            if k is not None and self._stale.priority(k)[0] <= now:
                return self._chose(k)
        best, best_score = None, -1.0
        beta = self.size_exponent
        for heap in self._classes.values():
            k = heap.peek(protected)
            if k is None:
                continue
            s = self._sessions.get(k)
            score = self.expected_remaining(s, now) * (s.size ** beta if beta != 1.0 else s.size)
            if score > best_score or (score == best_score and self._entered[k] < self._entered[best]):
                best, best_score = k, score
        return self._chose(best)

    def stale_at(self, key: Key, now: float) -> bool:
        """Whether `key` is past its stale deadline at `now` (counted as ended: goes first)."""
        return (self.stale_quantile is not None and key in self._stale
                and self._stale.priority(key)[0] <= now)

    def __contains__(self, key: object) -> bool:
        return key in self._entered

    def __len__(self) -> int:
        return len(self._entered)

    # ---- prediction -----------------------------------------------------------------------
    def expected_remaining(self, s: _Session, now: float) -> float:
        """Seconds until the session's next turn, given it has been idle since `s.last`."""
        if not self.idle_signal:
            return s.t_next - (s.last or 0.0)
        w = s.t_next - now
        if w > 0.0:
            return w
        if self._flat(s):
            return self.signal.center_s(s.signal)  # due any moment, until its own deadline
        f = math.exp(s.pace)
        idle = (now - (s.last or now)) / f
        return self.think.stats(s.answer).remaining(idle) * f

    def _flat(self, s: _Session) -> bool:
        return self.signal is not None and self.signal.flat(s.signal)

    def _access(self, key: Key, size: int, now: float) -> None:
        s = self._sessions.touch(key, now, self.__contains__)
        if s.last is not None and s.answer is not None:
            self._learn_gap(s, now - s.last)
        s.last = now
        s.size = size
        self._rank(key, s)

    def _learn_gap(self, s: _Session, gap: float) -> None:
        """One think time of `s` after its answer: the user's signal model, the population's
        think-time model (unless the user is flat) and the user's pace learn it."""
        median = self.think.stats(s.answer).quantiles[0.5]
        if self.signal is not None:
            flat = self._flat(s)  # the population learns what answers say from the others
            self.signal.observe(s.signal, gap, math.log(median) + s.pace)
        else:
            flat = False
        if not flat:
            self.think.observe(s.answer, gap)
            median = self.think.stats(s.answer).quantiles[0.5]
        r = math.log(max(gap, 0.5) / median)
        s.pace = self.pace_decay * s.pace + (1.0 - self.pace_decay) * r

    def _rank(self, key: Key, s: _Session) -> None:
        stats = self.think.stats(s.answer)
        f = math.exp(s.pace)
        last = s.last if s.last is not None else 0.0
        flat = self._flat(s)
        s.t_next = last + (self.signal.center_s(s.signal) if flat else stats.mean * f)
        order = self._entered[key]
        cls = self._size_class(s.size)
        if cls != s.cls and s.cls in self._classes:
            old = self._classes[s.cls]
            old.discard(key)
            if not len(old):
                del self._classes[s.cls]
        s.cls = cls
        heap = self._classes.get(cls)
        if heap is None:
            heap = self._classes[cls] = LazyHeap()
        heap.set(key, (-s.t_next, order))
        if self.stale_quantile is not None:
            idle = (self.signal.deadline_s(s.signal) if flat
                    else self._stale_idle(s, stats, self.stale_quantile) * f)
            deadline = last + idle * self.stale_factor
            self._stale.set(key, (deadline, order))

    def _size_class(self, size: int) -> int:
        if size <= 0:
            return -1
        return int(math.log2(size) * self.classes_per_octave)
