"""The think-time model learns quantiles, means and expected remaining waits per answer bucket."""
from __future__ import annotations

import random

from kv_store.eviction.think_time_model import ThinkTimeModel, answer_bucket


def test_learns_each_answer_buckets_distribution():
    rng = random.Random(0)
    m = ThinkTimeModel(prior_weight=0.01)
    for _ in range(20_000):
        a = rng.choice((10, 100))
        m.observe(a, rng.uniform(10, 20) if a == 10 else rng.uniform(100, 200))
    short, long_ = m.stats(10), m.stats(100)
    assert abs(short.mean - 15) < 1 and abs(long_.mean - 150) < 6
    assert abs(short.quantiles[0.5] - 15) < 1 and abs(long_.quantiles[0.5] - 150) < 6
    assert 10 <= short.quantiles[0.05] <= 11.5 and 19 <= short.quantiles[0.99] <= 21
    # After idling 120 s a long-answer session still has about (200 - 120) / 2 s to go.
    assert abs(long_.remaining(120) - 40) < 6
    assert long_.remaining(0) == long_.mean


def test_prior_ranks_longer_answers_later_before_any_data():
    m = ThinkTimeModel()
    means = [m.stats(a).mean for a in (5, 40, 100, 300)]
    assert means == sorted(means)


def test_decay_follows_a_change():
    m = ThinkTimeModel(decay_window=200, prior_weight=0.01)
    for _ in range(2000):
        m.observe(50, 30.0)
    for _ in range(2000):
        m.observe(50, 90.0)
    assert abs(m.stats(50).quantiles[0.5] - 90) < 5


def test_answer_buckets_are_monotone():
    assert [answer_bucket(a) for a in (0, 7, 8, 50, 1000)] == sorted(answer_bucket(a) for a in (0, 7, 8, 50, 1000))
    assert answer_bucket(None) == answer_bucket(40)
