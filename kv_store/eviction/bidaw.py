"""Bidaw: previous-answer-based eviction (the paper's mechanism).

For every access the policy measures the session's weighted reuse distance (ReuseDistanceMeter)
and files it into the small / promising / extreme regions (ReuseRegions). A ghost cache replays
the recent past under Belady and learns each promising bucket's hit rate. When a turn finishes
with an answer of `a` tokens, the session's next reuse distance is bounded below by
LB = (recent distinct bytes accessed per second) × (a low quantile of the think time after
answers of that length) — people read before they reply. The session's bucket distribution comes
from its own history of distances plus, as a prior, what sessions did after answers of that
length; buckets below LB's are zeroed and the rest renormalised. Hit potential =
P(small) + Σ P(promising_i) · hitrate_i; the lowest potential is evicted first. Potentials are
compared in steps of `potential_step`; within a step the session expected back last goes first
(then order of entry).

Beyond the paper, on by default (`stale_quantile=None` turns it off): a session idle past a high
quantile of the think time after its answer has probably ended and is evicted first. The paper's
scripts free ended sessions (an oracle); without this rule a live cache fills with them.
A session with one turn so far reaches that deadline sooner once the learned chance of a second
turn (ReturnModel, `return_horizon_s=None` turns it off) says most such sessions never return:
one-shot traffic then goes before conversations that come back (docs/policies.md).

Potentials are computed when a session answers (an access alone keeps the last one), with the
hit rates known then, so every call is O(log n) (heaps with lazy deletion).
"""
from __future__ import annotations

import math

from kv_store.eviction.answer_ranked import AnswerRankedPolicy
from kv_store.eviction.base import Key
from kv_store.eviction.lazy_heap import LazyHeap
from kv_store.eviction.ghost_cache import GhostCache
from kv_store.eviction.reuse_distance import ReuseDistanceMeter
from kv_store.eviction.reuse_regions import ReuseRegions
from kv_store.eviction.session_registry import SessionRegistry
from kv_store.eviction.think_time_model import (ANSWER_EDGES, N_ANSWER_BUCKETS, ThinkTimeModel,
                                                answer_bucket)

GIB = 1 << 30
DEFAULT_CAPACITY, DEFAULT_WATERMARK = 200 * GIB, 2 * GIB  # the paper's DRAM tier
# An answer length inside each answer bucket, to look up that bucket's statistics.
_ANSWER_REPR = [0] + list(ANSWER_EDGES)


class _Session:
    __slots__ = ("last", "answer", "history", "scale", "potential", "pace", "factor", "turns",
                 "awaiting_second")

    def __init__(self) -> None:
        self.last: float | None = None      # time of the latest access
        self.answer: int | None = None      # tokens of the latest answer
        # Decayed counts of this session's reuse buckets, stored × `scale` (lazy decay: the
        # latest observation weighs 1 once divided by scale).
        self.history: list[float] | None = None
        self.scale = 1.0
        self.potential: float | None = None  # hit potential computed at the latest answer
        self.pace = 0.0                      # log(own gap / model median), decayed mean
        self.factor = 1.0                    # exp(pace): the session's think-time multiplier
        self.turns = 0                       # answers seen
        self.awaiting_second = False         # one turn so far (its stale deadline may be sooner)


class BidawPolicy(AnswerRankedPolicy):
    name = "bidaw"

    def __init__(self, bucket_width: float = 0.2, n_promising: int = 7, lb_quantile: float = 0.05,
                 prior_weight: float = 2.0, history_decay: float = 0.8, ghost_lag_s: float = 300.0,
                 ghost_window: float = 4000.0, rate_window: float = 500.0,
                 protect_queue: int = 30, tie_break: str = "return",
                 stale_quantile: float | None = 0.98, potential_step: float = 0.25,
                 ghost_sample_rate: int = 2, pace_decay: float | None = 0.8,
                 pace_in_lb: bool = True, pace_in_stale: bool = True,
                 tie_quantile: float | None = None,
                 return_horizon_s: float | None = 600.0) -> None:
        super().__init__(protect_queue, return_horizon_s)
        self.tie_quantile = tie_quantile
        self.pace_decay = pace_decay
        self.pace_in_lb = pace_in_lb
        self.pace_in_stale = pace_in_stale
        self.potential_step = potential_step
        self.tie_break = tie_break
        # Not in the paper (its scripts free ended sessions, an oracle): a session idle past this
        # quantile of the think time after its answer is taken as ended and evicted first.
        self.stale_quantile = stale_quantile
        self._stale = LazyHeap()
        # Sized for the paper's tier until `set_capacity` (make_policy calls it) says otherwise.
        self.regions = ReuseRegions(DEFAULT_CAPACITY, bucket_width, n_promising)
        nb = self.regions.n_buckets
        self.ghost = GhostCache(DEFAULT_CAPACITY, nb, DEFAULT_WATERMARK, ghost_lag_s, ghost_window,
                                sample_rate=ghost_sample_rate)
        self.meter = ReuseDistanceMeter()
        self.think = ThinkTimeModel(extra_quantiles=(lb_quantile, stale_quantile, tie_quantile))
        self.lb_quantile = lb_quantile
        self.prior_weight = prior_weight
        self.history_decay = history_decay
        # What sessions did after answers of each length: decayed counts per reuse bucket.
        self._prior = [[1.0 / nb] * nb for _ in range(N_ANSWER_BUCKETS + 1)]  # +1: unknown answer
        self._prior_gamma = 1.0 - 1.0 / 2000.0
        self._prior_inc = [1.0] * (N_ANSWER_BUCKETS + 1)
        # Distinct bytes accessed per second, from (reuse distance, gap) pairs.
        self._rate_bytes = 0.0
        self._rate_secs = 0.0
        self._rate_gamma = 1.0 - 1.0 / rate_window
        self._sessions: SessionRegistry[_Session] = SessionRegistry(_Session)
        self._heap = LazyHeap()
        self._unranked: dict[Key, _Session] = {}  # accessed, not yet re-ranked
        self.refresh_every = 64
        self._until_refresh = 0

    # ---- optional hooks -------------------------------------------------------------------
    def set_capacity(self, capacity_bytes: int, watermark_bytes: int | None = None) -> None:
        """The size of the tier this policy orders (it defines the small region)."""
        self.regions.set_capacity(capacity_bytes)
        self.ghost.set_capacity(capacity_bytes, watermark_bytes)
        self._until_refresh = 0

    # ---- the interface --------------------------------------------------------------------
    def observe_answer(self, key: Key, answer_tokens: int, now: float) -> None:
        s = self._note_answer(key, answer_tokens, now)
        if key in self._entered:
            self._unranked.pop(key, None)
            self._rank(key, s)

    def remove(self, key: Key) -> None:
        self._note_removal(key)
        if self._entered.pop(key, None) is not None:
            self._heap.discard(key)
            self._stale.discard(key)
            self._unranked.pop(key, None)

    def victim(self, now: float, exclude: frozenset | set = frozenset()) -> Key | None:
        self._rank_pending()
        protected = self._protected | exclude if exclude else self._protected
        if self.stale_quantile is not None:
            k = self._stale.peek(protected)
            if k is not None and self._stale.priority(k)[0] <= now:
                return self._chose(k)
        return self._chose(self._heap.peek(protected))

    def __contains__(self, key: object) -> bool:
        return key in self._entered

    def __len__(self) -> int:
        return len(self._entered)

    # ---- learning -------------------------------------------------------------------------
    def _access(self, key: Key, size: int, now: float) -> None:
        s = self._sessions.touch(key, now, self.__contains__)
        distance = self.meter.access(key, size)
        bucket = None if distance is None else self.regions.bucket(distance)
        self.ghost.record(key, size, bucket, now)
        if s.last is not None and distance is not None:
            gap = now - s.last
            self.think.observe(s.answer, gap)
            d = self.pace_decay
            if d is not None and s.answer is not None:
                r = math.log(max(gap, 0.5) / self.think.stats(s.answer).quantiles[0.5])
                s.pace = d * s.pace + (1.0 - d) * r
                s.factor = math.exp(s.pace)
            # Distinct bytes per second over about the last `rate_window` returns (ratio of
            # decayed sums), so the bound follows the load.
            g = self._rate_gamma
            self._rate_bytes = self._rate_bytes * g + distance
            self._rate_secs = self._rate_secs * g + (gap if gap > 1e-3 else 1e-3)
            self._observe_bucket(s, bucket)
        s.last = now
        # Ranked when this turn's answer arrives, or at the next eviction decision if it has not
        # by then (keeping the potential of the last answer): one heap update per turn, not two.
        self._unranked[key] = s

    def _rank_pending(self) -> None:
        for key, s in self._unranked.items():
            self._rank(key, s, s.potential)
        self._unranked.clear()

    def _observe_bucket(self, s: _Session, bucket: int) -> None:
        # Population prior: lazy exponential decay (the increment grows instead of every count
        # shrinking); only ratios are used, so the scale never matters.
        a = self._answer_index(s.answer)
        inc = self._prior_inc[a] / self._prior_gamma
        if inc > 1e100:
            self._prior[a] = [x / inc for x in self._prior[a]]
            inc = 1.0
        self._prior_inc[a] = inc
        self._prior[a][bucket] += inc
        if s.history is None:
            s.history = [0.0] * self.regions.n_buckets
        else:
            s.scale /= self.history_decay
            if s.scale > 1e100:
                s.history = [x / s.scale for x in s.history]
                s.scale = 1.0
        s.history[bucket] += s.scale

    @staticmethod
    def _answer_index(answer: int | None) -> int:
        return N_ANSWER_BUCKETS if answer is None else answer_bucket(answer)

    def lower_bound(self, answer: int | None) -> float:
        """Predicted lower bound (bytes) of the next reuse distance after an answer."""
        if self._rate_secs <= 0.0:
            return 0.0
        gap_lb = self.think.stats(answer).quantiles[self.lb_quantile]
        return self._rate_bytes / self._rate_secs * gap_lb

    def hit_potential(self, answer: int | None, history: list[float] | None,
                      scale: float = 1.0, factor: float = 1.0) -> float:
        """P(small) + Σ P(promising_i)·hitrate_i over the buckets at or above the lower bound's.

        `history` holds the session's own bucket counts × `scale`; `factor` = the session's own
        think-time multiplier (scales its lower bound when `pace_in_lb`)."""
        self._until_refresh -= 1
        if self._until_refresh <= 0:
            self._maybe_refresh()
        a = N_ANSWER_BUCKETS if answer is None else answer_bucket(answer)
        if self.pace_in_lb and factor != 1.0:
            first = self.regions.bucket(self._lb_bytes[a] * factor)
        else:
            first = self._lb_bucket[a]
        num, mass = 0.0, 0.0
        if history is not None:
            hr = self._hr
            for j in range(first, len(history)):
                x = history[j]
                if x:
                    num += x * hr[j]
                    mass += x
            num /= scale
            mass /= scale
        num += self._prior_num[a][first]
        mass += self._prior_mass[a][first]
        return num / mass if mass > 0.0 else self._hr[first]

    def _maybe_refresh(self) -> None:
        """Re-derive hit rates, normalised priors and lower-bound buckets (every few rankings)."""
        self._until_refresh = self.refresh_every
        nb, ext = self.regions.n_buckets, self.regions.extreme
        self._hr = [1.0] + [self.ghost.hit_rate(j) for j in range(1, ext)] + [0.0]
        self._lb_bytes = [self.lower_bound(None if a == N_ANSWER_BUCKETS else _ANSWER_REPR[a])
                          for a in range(N_ANSWER_BUCKETS + 1)]
        self._lb_bucket = [self.regions.bucket(x) for x in self._lb_bytes]
        # The prior's share of each potential: numerator and mass at or above each bucket
        # (suffix sums, so any lower-bound bucket is one look-up).
        self._prior_num, self._prior_mass = [], []
        for prior in self._prior:
            w = self.prior_weight / (sum(prior) or 1.0)
            num, mass = [0.0] * (nb + 1), [0.0] * (nb + 1)
            for j in range(nb - 1, -1, -1):
                num[j] = num[j + 1] + prior[j] * w * self._hr[j]
                mass[j] = mass[j + 1] + prior[j] * w
            self._prior_num.append(num)
            self._prior_mass.append(mass)

    def _rank(self, key: Key, s: _Session, potential: float | None = None) -> None:
        """(Re)file the session: by its potential (recomputed unless given), then by when it is
        expected back (latest first), then by order of entry; and its stale deadline."""
        if potential is None:
            potential = self.hit_potential(s.answer, s.history, s.scale, s.factor)
            if self.potential_step > 0.0:
                potential = int(potential / self.potential_step)
            s.potential = potential
        stats = self.think.stats(s.answer)
        last = s.last if s.last is not None else 0.0
        order = self._entered[key]
        if self.tie_break == "recency":
            tie = last
        else:  # the session expected back last goes first
            t = stats.mean if self.tie_quantile is None else stats.quantiles[self.tie_quantile]
            tie = last + t * s.factor
        self._heap.set(key, (potential, -tie, order))
        if self.stale_quantile is not None:
            # When the session counts as ended: a high quantile of its expected think time.
            q = self._stale_idle(s, stats, self.stale_quantile)
            if self.pace_in_stale:
                q *= s.factor
            self._stale.set(key, (last + q, order))
