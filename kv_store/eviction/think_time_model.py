"""How long a user waits before the next turn, given the length of the answer just read.

Learned online, one decayed log-spaced histogram of observed gaps per answer-length bucket, with
a weak prior (0.63 s a token + 20 s, the public trace's fit) so a cold store still ranks sensibly.
Derived statistics (mean, quantiles, mean excess over an idle time) are cached per bucket and
refreshed every `refresh` observations of that bucket, so queries are O(1) / O(log bins).
"""
from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

# Answer-length bucket edges (tokens), roughly geometric: the signal is smooth in log(answer).
ANSWER_EDGES: tuple[int, ...] = (8, 16, 24, 32, 40, 48, 64, 80, 96, 128, 160, 224, 320)


def answer_bucket(answer_tokens: int | None) -> int:
    """0..len(ANSWER_EDGES); unknown answers go to the middle bucket of typical answers."""
    if answer_tokens is None:
        return 5
    return bisect_right(ANSWER_EDGES, answer_tokens)


N_ANSWER_BUCKETS = len(ANSWER_EDGES) + 1

# Gap histogram bins: 0.5 s .. ~2.3 h, eight per doubling (a bin spans ±4.4%).
_GAP_MIN, _BINS_PER_OCTAVE, _N_BINS = 0.5, 8, 112
GAP_EDGES: tuple[float, ...] = tuple(_GAP_MIN * 2 ** (i / _BINS_PER_OCTAVE) for i in range(_N_BINS + 1))
# Representative value of each bin (geometric middle); the first bin also holds gaps below 0.5 s.
_MIDS = tuple(math.sqrt(GAP_EDGES[i] * GAP_EDGES[i + 1]) for i in range(_N_BINS))


def gap_bin(gap_s: float) -> int:
    return min(max(bisect_right(GAP_EDGES, gap_s) - 1, 0), _N_BINS - 1)


@dataclass
class GapStats:
    """Summary of one bucket's gap distribution (seconds)."""

    mean: float
    quantiles: dict[float, float]
    # excess[i] = E[G - x | G > x] for x = GAP_EDGES[i], the expected remaining wait after idling x
    excess: list[float] = field(default_factory=list)
    # -P(G >= x) for x = GAP_EDGES[i], ascending (negated so bisect finds a survival level)
    neg_survival: list[float] = field(default_factory=list)

    def remaining(self, idle: float) -> float:
        """Expected remaining wait after `idle` seconds without a return (0 when past the support)."""
        if idle <= GAP_EDGES[0]:
            return max(self.mean - max(idle, 0.0), 0.0)
        i = min(bisect_right(GAP_EDGES, idle) - 1, len(self.excess) - 1)
        return self.excess[i]

    def gap_at_survival(self, tail: float) -> float:
        """The shortest gap x (a bin edge) with P(G >= x) <= `tail`: the 1 - tail quantile."""
        i = bisect_left(self.neg_survival, -tail)
        return GAP_EDGES[min(i, len(GAP_EDGES) - 1)]


DEFAULT_QUANTILES = (0.05, 0.1, 0.5, 0.9, 0.95, 0.99)


class ThinkTimeModel:
    def __init__(self, decay_window: float = 2000.0, refresh: int = 64,
                 prior_s_per_token: float = 0.63, prior_base_s: float = 20.0, prior_weight: float = 4.0,
                 quantiles: tuple[float, ...] = DEFAULT_QUANTILES, extra_quantiles: tuple = ()) -> None:
        # Each bucket forgets with a half-life of about `decay_window` of its own observations.
        self._gamma = 1.0 - 1.0 / decay_window
        self._refresh = refresh
        self._q = tuple(sorted({*quantiles, *(q for q in extra_quantiles if q is not None)}))
        if any(not 0.0 < q < 1.0 for q in self._q):
            raise ValueError(f"quantiles must be in (0, 1): {self._q}")
        self._hist = [[0.0] * _N_BINS for _ in range(N_ANSWER_BUCKETS)]
        self._inc = [1.0] * N_ANSWER_BUCKETS   # weight of the next observation (lazy decay)
        self._since = [0] * N_ANSWER_BUCKETS
        self._stats: list[GapStats] = [None] * N_ANSWER_BUCKETS  # type: ignore[list-item]
        for b in range(N_ANSWER_BUCKETS):
            lo = ANSWER_EDGES[b - 1] if b > 0 else 0
            hi = ANSWER_EDGES[b] if b < len(ANSWER_EDGES) else lo * 1.5
            typical = prior_base_s + prior_s_per_token * (lo + hi) / 2
            for factor, w in ((0.6, 0.25), (1.0, 0.5), (1.6, 0.25)):
                self._hist[b][gap_bin(typical * factor)] += prior_weight * w
            self._stats[b] = self._summarise(b)

    def observe(self, answer_tokens: int | None, gap_s: float) -> None:
        """A user returned `gap_s` seconds after a turn whose answer had `answer_tokens` tokens."""
        b = answer_bucket(answer_tokens)
        inc = self._inc[b] / self._gamma
        if inc > 1e150:  # renormalise the lazy decay before it overflows
            self._hist[b] = [c / inc for c in self._hist[b]]
            inc = 1.0
        self._inc[b] = inc
        self._hist[b][gap_bin(gap_s)] += inc
        self._since[b] += 1
        if self._since[b] >= self._refresh:
            self._since[b] = 0
            self._stats[b] = self._summarise(b)

    def stats(self, answer_tokens: int | None) -> GapStats:
        return self._stats[answer_bucket(answer_tokens)]

    def _summarise(self, b: int) -> GapStats:
        h = self._hist[b]
        total = sum(h)
        mean = sum(c * m for c, m in zip(h, _MIDS)) / total
        quantiles: dict[float, float] = {}
        acc, qi, qs = 0.0, 0, sorted(self._q)
        for i, c in enumerate(h):
            while qi < len(qs) and acc + c >= qs[qi] * total and c > 0:
                f = (qs[qi] * total - acc) / c  # interpolate geometrically inside the bin
                quantiles[qs[qi]] = GAP_EDGES[i] * (GAP_EDGES[i + 1] / GAP_EDGES[i]) ** f
                qi += 1
            acc += c
        for q in qs[qi:]:
            quantiles[q] = _MIDS[-1]
        # Mean excess at each bin edge, by a suffix scan: E[G - x | G > x].
        excess = [0.0] * _N_BINS
        neg_survival = [0.0] * _N_BINS
        tail_w, tail_m = 0.0, 0.0
        for i in range(_N_BINS - 1, -1, -1):
            tail_w += h[i]
            tail_m += h[i] * _MIDS[i]
            x = GAP_EDGES[i]
            excess[i] = (tail_m / tail_w - x) if tail_w > 0 else 0.0
            neg_survival[i] = -tail_w / total
        return GapStats(mean, quantiles, excess, neg_survival)
