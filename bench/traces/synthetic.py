"""A seeded synthetic trace with the statistics of the paper's public trace (bidaw_part1.txt).

Fitted on part 1 (4,486 users, 103,606 turns, 5.3 h): about 14 new users a minute; rounds per user
gamma(shape 2) with mean 23 (p10/p50/p90 = 5/19/45 measured, 6/19/45 model); query tokens
lognormal, median 26, mean 35; answer tokens lognormal, median 38, mean 45; the gap before the next
turn = answer tokens × a per-user reading pace (median 0.75 s/token) + a lognormal base (median 11 s):
reading makes think time grow with the answer, the signal Bidaw's eviction relies on.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.traces.turn import Turn


@dataclass(frozen=True)
class SynthConfig:
    users: int = 4486
    users_per_min: float = 14.1
    rounds_mean: float = 23.0
    rounds_shape: float = 2.0
    query_median: float = 26.0
    query_sigma: float = 0.78
    answer_median: float = 38.0
    answer_sigma: float = 0.58
    max_tokens: int = 4096
    read_s_per_token: float = 0.75  # median reading pace
    read_sigma: float = 0.25
    base_think_s: float = 11.0      # median typing/thinking time on top of reading
    base_sigma: float = 0.6
    whole_seconds: bool = True      # timestamps as the paper's trace: integer seconds
    seed: int = 0


def think_time(answer_len: int, rng: random.Random, cfg: SynthConfig, pace: float | None = None) -> float:
    """Seconds between a turn's arrival and the same user's next turn."""
    if pace is None:
        pace = cfg.read_s_per_token * rng.lognormvariate(0.0, cfg.read_sigma)
    return answer_len * pace + cfg.base_think_s * rng.lognormvariate(0.0, cfg.base_sigma)


def _length(rng: random.Random, median: float, sigma: float, cap: int) -> int:
    return max(1, min(cap, int(round(median * rng.lognormvariate(0.0, sigma)))))


def synthesize(cfg: SynthConfig = SynthConfig()) -> list[Turn]:
    """All turns, sorted by time; user ids 0..users-1 in order of arrival."""
    rng = random.Random(cfg.seed)
    events: list[tuple[float, int, int, int, int]] = []  # (time, user, q, a, round)
    start = 0.0
    scale = cfg.rounds_mean / cfg.rounds_shape
    for user in range(cfg.users):
        start += rng.expovariate(cfg.users_per_min / 60.0)
        rounds = max(1, int(round(rng.gammavariate(cfg.rounds_shape, scale))))
        pace = cfg.read_s_per_token * rng.lognormvariate(0.0, cfg.read_sigma)
        now = start
        for rnd in range(rounds):
            q = _length(rng, cfg.query_median, cfg.query_sigma, cfg.max_tokens)
            a = _length(rng, cfg.answer_median, cfg.answer_sigma, cfg.max_tokens)
            ts = math.floor(now) if cfg.whole_seconds else round(now, 3)
            events.append((ts, user, q, a, rnd))
            now += think_time(a, rng, cfg, pace)
    events.sort(key=lambda e: (e[0], e[1], e[4]))
    return [Turn(u, float(t), q, a, r) for t, u, q, a, r in events]
