"""Eviction policies on hand-made cases whose right answer is known."""
from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kv_store.eviction.base import EvictionPolicy
from kv_store.eviction.registry import NEEDS_FUTURE, POLICY_NAMES, make_policy

GIB = 1 << 30


def test_bidaw_defaults():
    p = make_policy("bidaw")
    assert (p.stale_quantile, p.potential_step, p.pace_decay, p.ghost.sample_rate) == (0.98, 0.25, 0.8, 2)
    assert make_policy("bidaw-size").size_exponent == 0.2


def test_registry_names_and_errors():
    assert POLICY_NAMES == ("fifo", "lru", "queue-aware", "bidaw", "bidaw-size", "belady")
    for name in POLICY_NAMES:
        p = make_policy(name)
        assert isinstance(p, EvictionPolicy) and p.name == name and len(p) == 0
    assert NEEDS_FUTURE == {"belady", "foresight-prefetch"}
    with pytest.raises(ValueError):
        make_policy("mru")
    with pytest.raises(TypeError):
        make_policy("lru", lookahead=3)
    assert make_policy("queue-aware", lookahead=5).lookahead == 5


def _evict_all(p: EvictionPolicy, now: float = 100.0) -> list:
    out = []
    while (v := p.victim(now)) is not None:
        out.append(v)
        p.remove(v)
    return out


def test_fifo_ignores_hits_and_breaks_ties_by_entry():
    p = make_policy("fifo")
    p.admit("a", 1, 0)
    p.admit("b", 1, 0)
    p.admit("c", 1, 1)
    p.touch("a", 5, 2)
    assert _evict_all(p) == ["a", "b", "c"]


def test_lru_refreshes_on_hit_and_ties_go_to_entry_order():
    p = make_policy("lru")
    p.admit("a", 1, 0)
    p.admit("b", 1, 1)
    p.admit("c", 1, 2)
    p.touch("a", 1, 3)
    # b and c hit at the same whole second: b entered first, so it goes first, whatever the
    # order of the hits.
    p.touch("c", 1, 4)
    p.touch("b", 1, 4)
    assert _evict_all(p) == ["a", "b", "c"]


def test_every_policy_respects_exclude_and_remove():
    for name in POLICY_NAMES:
        p = make_policy(name)
        for i, k in enumerate("abcd"):
            if name == "belady":
                p.set_next_use(k, 10 + i)
            p.admit(k, GIB, float(i))
            p.observe_answer(k, 10 * (i + 1), float(i))
        v = p.victim(5.0, exclude={"a", "b", "c"})
        assert v == "d", name
        assert p.victim(5.0, exclude=set("abcd")) is None
        p.remove("d")
        p.remove("zzz")  # unknown keys are ignored
        assert "d" not in p and len(p) == 3
        assert p.victim(5.0) in {"a", "b", "c"}


def test_queue_aware_never_evicts_the_next_n_queued():
    p = make_policy("queue-aware", lookahead=2)
    for i, k in enumerate("abcd"):
        p.admit(k, 1, float(i))
    p.observe_queue(iter(["a", "b", "c"]), 4.0)  # only the first two count
    assert _evict_all(p) == ["c", "d"]
    p.observe_queue([], 5.0)
    assert _evict_all(p) == ["a", "b"]


# ---- Belady equals a brute-force optimum on small unit-size cases --------------------------

def _belady_misses(seq: list[int], cap: int) -> int:
    p = make_policy("belady")
    cached: set[int] = set()
    misses = 0
    for i, k in enumerate(seq):
        nxt = next((j for j in range(i + 1, len(seq)) if seq[j] == k), len(seq))
        p.set_next_use(k, nxt)
        if k in cached:
            p.touch(k, 1, i)
        else:
            misses += 1
            cached.add(k)
            p.admit(k, 1, i)
        while len(cached) > cap:
            v = p.victim(i)
            p.remove(v)
            cached.discard(v)
    return misses


def _optimal_misses(seq: list[int], cap: int) -> int:
    """Exhaustive search over every eviction choice (the just-used key may be dropped too)."""
    states = {frozenset(): 0}
    for k in seq:
        nxt: dict[frozenset, int] = {}
        for cache, misses in states.items():
            m = misses + (k not in cache)
            full = cache | {k}
            options = [full] if len(full) <= cap else [full - {v} for v in full]
            for o in options:
                if nxt.get(o, 1 << 30) > m:
                    nxt[o] = m
        states = nxt
    return min(states.values())


def test_belady_matches_brute_force_optimum():
    rng = random.Random(7)
    for _ in range(150):
        n_keys, cap = rng.randint(3, 5), rng.randint(1, 3)
        seq = [rng.randrange(n_keys) for _ in range(rng.randint(4, 12))]
        assert _belady_misses(seq, cap) == _optimal_misses(seq, cap), (seq, cap)


def test_belady_ties_go_to_entry_order():
    p = make_policy("belady")
    for k in "abc":
        p.set_next_use(k, float("inf"))
        p.admit(k, 1, 0)
    assert _evict_all(p) == ["a", "b", "c"]


# ---- Bidaw and bidaw-size evict the user who returns last when the predictor is right -------

def _train(p: EvictionPolicy, seconds_per_token: float = 0.5, base: float = 5.0,
           sessions: int = 60, turns: int = 1500, seed: int = 3) -> float:
    """A workload where the think time is exactly base + 0.5 s × answer tokens."""
    rng = random.Random(seed)
    resident: set[int] = set()
    due: list[tuple[float, int]] = [(rng.random() * 20, s) for s in range(sessions)]
    now = 0.0
    for _ in range(turns):
        due.sort()
        now, s = due.pop(0)
        if s in resident:
            p.touch(s, GIB, now)
        else:
            p.admit(s, GIB, now)
            resident.add(s)
        a = rng.choice((10, 40, 120, 240))
        p.observe_answer(s, a, now)
        due.append((now + base + seconds_per_token * a, s))
        while len(resident) > 12:
            v = p.victim(now)
            p.remove(v)
            resident.discard(v)
    for s in list(resident):
        p.remove(s)
    return now


@pytest.mark.parametrize("name", ["bidaw", "bidaw-size"])
def test_bidaw_evicts_the_session_back_last(name):
    p = make_policy(name)
    if hasattr(p, "set_capacity"):
        p.set_capacity(12 * GIB)
    now = _train(p)
    t = now + 1.0
    for key, answer in (("short", 10), ("medium", 40), ("long", 240)):
        p.admit(key, GIB, t)
        p.observe_answer(key, answer, t)
    order = []
    others = set()
    for _ in range(3):
        v = p.victim(t + 1.0, exclude=others)
        order.append(v)
        p.remove(v)
    assert order == ["long", "medium", "short"]


def test_bidaw_size_prefers_the_larger_of_equal_waits():
    p = make_policy("bidaw-size")
    now = _train(p)
    t = now + 1.0
    p.admit("small", GIB, t)
    p.observe_answer("small", 40, t)
    p.admit("big", 8 * GIB, t)
    p.observe_answer("big", 40, t)
    assert p.victim(t + 1.0) == "big"


def test_bidaw_size_stale_session_goes_first():
    p = make_policy("bidaw-size")
    now = _train(p)
    p.admit("ended", GIB, now)
    p.observe_answer("ended", 10, now)  # expected back within ~10 s
    later = now + 3600.0
    p.admit("reading", 8 * GIB, later)
    p.observe_answer("reading", 240, later)  # a long wait and a big KV, but alive
    assert p.victim(later + 1.0) == "ended"


@pytest.mark.parametrize("stale_quantile", [0.99, None])
def test_bidaw_stale_rule_is_switchable(stale_quantile):
    p = make_policy("bidaw", stale_quantile=stale_quantile)  # None: the paper's mechanism alone
    now = _train(p)
    p.admit("ended", GIB, now)
    p.observe_answer("ended", 10, now)  # a short answer: a high potential, expected back soon
    later = now + 3600.0
    p.admit("reading", GIB, later)
    p.observe_answer("reading", 240, later)  # a long answer: a low potential
    expected = "ended" if stale_quantile is not None else "reading"
    assert p.victim(later + 1.0) == expected


# ---- every policy, random operations: the interface's promises hold ------------------------

ops = st.lists(st.tuples(st.sampled_from(["admit", "touch", "remove", "victim", "answer", "queue"]),
                         st.integers(0, 7), st.integers(0, 4)), max_size=60)


@settings(max_examples=40, deadline=None)
@given(ops=ops, name=st.sampled_from(POLICY_NAMES))
def test_random_operations_keep_the_contract(ops, name):
    p = make_policy(name)
    resident: set[int] = set()
    for step, (op, key, arg) in enumerate(ops):
        now = float(step)
        if name == "belady":
            p.set_next_use(key, step + 1 + arg)
        if op == "admit" and key not in resident:
            p.admit(key, arg * GIB, now)
            resident.add(key)
        elif op == "touch" and key in resident:
            p.touch(key, arg * GIB, now)
        elif op == "remove":
            p.remove(key)
            resident.discard(key)
        elif op == "answer":
            p.observe_answer(key, 10 * arg, now)
        elif op == "queue":
            p.observe_queue([key, (key + 1) % 8], now)
        elif op == "victim":
            excl = {key}
            v = p.victim(now, exclude=excl)
            if v is not None:
                assert v in resident and v not in excl
        assert len(p) == len(resident)
        assert all(k in p for k in resident)
    for k in itertools.islice(iter(resident), 3):
        p.remove(k)


def test_a_time_scaled_policy_sees_trace_seconds():
    from kv_store.eviction.registry import make_policy
    from kv_store.eviction.time_scaled import TimeScaled

    seen = []
    inner = make_policy("lru")
    original = inner.admit
    inner.admit = lambda key, size, now: (seen.append(now), original(key, size, now))
    policy = TimeScaled(inner, 0.02)
    policy.admit("a", 10, 2.0)  # 2 s of a x0.02 replay are 100 s of the trace
    policy.admit("b", 10, 3.0)
    assert seen == [100.0, 150.0] and len(policy) == 2 and "a" in policy
    assert policy.victim(4.0) == "a" and policy.name == "lru"
