"""One-shot sessions in the cache-only replay: the store's accounting (`kv_after_turn`), first
turns counted apart, and on the paper's trace: the return model leaves today's figures exactly as
they are (F = 0) and wins back part of what one-shots cost (F = 0.5)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.sim.cache import GIB, prepare_accesses, replay
from bench.traces import Turn, load_trace
from bench.traces.one_shot import add_one_shot
from kv_store.eviction.registry import make_policy

REPO = Path(__file__).resolve().parents[1]
TRACES = Path(os.environ.get("BIDAW_TRACES", REPO.parent / "shared" / "traces"))
PART1 = TRACES / "bidaw_part1.txt"
WINDOW = (6600, 7200)


def test_kv_after_turn_and_first_turns_by_hand():
    turns = [Turn(1, 0, 30, 20, 0), Turn(2, 1, 40, 10, 0), Turn(1, 2, 10, 10, 1),
             Turn(3, 3, 5, 5, 0), Turn(1, 4, 1, 1, 2), Turn(2, 5, 1, 1, 1)]
    paper = prepare_accesses(turns, kv_bytes_per_token=1, max_kv_tokens=60)
    store = prepare_accesses(turns, kv_bytes_per_token=1, max_kv_tokens=60, kv_after_turn=True)
    assert paper.sizes == [0, 0, 50, 0, 60, 50]
    assert store.sizes == [50, 50, 60, 10, 60, 52]   # the turn's own tokens count, capped
    r = replay(store, make_policy("lru"), 1000, 0, end_oracle=False)
    assert (r.hits, r.misses, r.firsts) == (3, 0, 3)
    assert r.turn_hit_rate == pytest.approx(3 / 6) and r.hit_rate == 1.0
    # Capacity 100: user 1 growing to 60 overfills it and LRU drops user 2, whose turn 2 misses.
    r = replay(store, make_policy("lru"), 100, 0, end_oracle=False)
    assert (r.hits, r.misses, r.firsts) == (2, 1, 3)
    assert r.as_dict()["turn_hit_rate"] == pytest.approx(2 / 6)
    # The paper's accounting: first turns hold nothing, so nothing is ever evicted here.
    r = replay(paper, make_policy("lru"), 100, 0, end_oracle=False)
    assert (r.hits, r.misses, r.firsts) == (3, 0, 3)


@pytest.fixture(scope="module")
def part1():
    assert PART1.exists(), f"{PART1} is needed (../shared/traces or $BIDAW_TRACES)"
    return load_trace(PART1)


def _hit_rate(log, name, cap, end_oracle, **kw):
    p = make_policy(name, **kw)
    if hasattr(p, "set_capacity"):
        p.set_capacity(cap * GIB)
    return 100 * replay(log, p, cap * GIB, 2 * GIB, WINDOW, end_oracle).hit_rate


@pytest.mark.parametrize("end_oracle", [True, False])
def test_original_trace_decides_exactly_as_without_the_model(part1, end_oracle):
    log = prepare_accesses(part1, sample_users=0.3)
    for name in ("bidaw", "bidaw-size"):
        for cap in (200, 120):
            new = _hit_rate(log, name, cap, end_oracle)
            old = _hit_rate(log, name, cap, end_oracle, return_horizon_s=None)
            assert new == old, (name, cap, end_oracle)


def test_half_one_shot_the_model_wins_back_hits(part1):
    mixed = add_one_shot(part1, 0.5, seed=0)
    log = prepare_accesses(mixed, sample_users=0.3, kv_after_turn=True)
    for name in ("bidaw", "bidaw-size"):
        for cap in (200, 120):
            new = _hit_rate(log, name, cap, False)
            old = _hit_rate(log, name, cap, False, return_horizon_s=None)
            assert new >= old + 0.3, (name, cap, new, old)
