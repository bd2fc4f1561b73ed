"""The online weighted reuse distance equals its definition, through compactions."""
from __future__ import annotations

import random

from kv_store.eviction.reuse_distance import ReuseDistanceMeter
from kv_store.eviction.reuse_regions import ReuseRegions


def _brute(history: list[tuple[int, int]], key: int) -> int | None:
    """Bytes of other sessions (each at its latest size) accessed since key's previous access."""
    last = max((i for i, (k, _) in enumerate(history) if k == key), default=None)
    if last is None:
        return None
    latest = {}
    for k, size in history[last + 1:]:
        latest[k] = size
    return sum(latest.values())


def test_matches_the_definition_and_survives_compaction():
    rng = random.Random(3)
    meter = ReuseDistanceMeter(horizon=16)  # 12 sessions: compactions keep everyone
    history: list[tuple[int, int]] = []
    for _ in range(2000):
        key, size = rng.randrange(12), rng.randrange(6)
        assert meter.access(key, size) == _brute(history, key)
        history.append((key, size))


def test_sessions_past_the_horizon_are_unknown():
    meter = ReuseDistanceMeter(horizon=2)
    for key in range(10):
        meter.access(key, 1)
    assert meter.access(0, 1) is None      # forgotten: unknown, i.e. larger than anything kept
    assert meter.access(9, 1) in (1, None)
    assert len(meter) <= 4 + 2


def test_regions():
    r = ReuseRegions(100, width=0.2, n_promising=7)
    assert [r.bucket(d) for d in (0, 99, 100, 119, 120, 239, 240, 10_000, None)] == \
        [0, 0, 1, 1, 2, 7, 8, 8, 8]
    assert r.n_buckets == 9 and r.extreme == 8
