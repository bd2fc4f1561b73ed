"""P(second turn | one turn so far): the ReturnModel on known sequences, and bidaw / bidaw-size
on a one-shot stream beside a returning user (the returning user's KV survives)."""
from __future__ import annotations

import pytest

from bench.sim.cache import prepare_accesses, replay
from bench.traces import Turn
from kv_store.eviction.registry import make_policy
from kv_store.eviction.return_model import ReturnModel


def test_counts_returns_inside_the_horizon():
    m = ReturnModel(horizon_s=10.0, window=1e9, prior_weight=0.0)
    assert m.probability() == 1.0  # no data, no prior: the default prior value
    for k in range(4):
        m.started(k, 0.0)
    m.returned(0, 5.0)          # back in time
    m.returned(1, 10.0)         # exactly at the horizon: still back
    assert m.resolved == 2 and m.probability() == 1.0 and len(m) == 2
    m.started(9, 20.0)          # time passes: 2 and 3 never came back
    assert m.resolved == 4 and m.probability() == pytest.approx(0.5) and len(m) == 1
    m.returned(2, 21.0)         # too late, already counted as gone: not counted twice
    m.returned(0, 22.0)         # not pending any more: ignored
    assert m.resolved == 4 and m.probability() == pytest.approx(0.5)


def test_prior_and_decay():
    m = ReturnModel(horizon_s=1.0, window=1e9, prior=1.0, prior_weight=4.0)
    for k in range(4):
        m.started(k, float(k) * 10)
    m.started("x", 100.0)
    assert m.probability() == pytest.approx(4 / 8)   # 4 prior returns, 4 observed non-returns
    fast = ReturnModel(horizon_s=1.0, window=10.0, prior_weight=4.0)
    for k in range(200):
        fast.started(k, float(k) * 10)
    assert fast.probability() < 1e-6                  # the prior is forgotten


def test_bounded_pending():
    m = ReturnModel(horizon_s=1e9, max_pending=100)
    for k in range(1000):
        m.started(k, float(k))
    assert len(m) == 100 and m.resolved == 0          # dropped uncounted, oldest first
    m.returned(999, 1000.0)
    m.returned(0, 1000.0)                             # dropped: not counted
    assert m.resolved == 1


def test_forget_counts_nothing():
    m = ReturnModel(horizon_s=10.0, window=1e9, prior_weight=0.0)
    m.started("a", 0.0)
    m.started("b", 0.0)
    m.forget("a")
    m.returned("a", 1.0)
    m.started("c", 50.0)   # "b" expires
    assert m.resolved == 1 and m.probability() == 0.0


def test_gap_at_survival_of_a_learned_think_time():
    from kv_store.eviction.think_time_model import GAP_EDGES, ThinkTimeModel

    m = ThinkTimeModel(decay_window=1e9, refresh=1)
    for i in range(2000):  # gaps 10 s .. 200 s, uniform in rank
        m.observe(40, 10.0 + 190.0 * i / 1999)
    st = m.stats(40)
    assert st.gap_at_survival(1.0) == GAP_EDGES[0]
    assert st.gap_at_survival(0.5) == pytest.approx(105.0, rel=0.06)
    assert st.gap_at_survival(0.1) == pytest.approx(181.0, rel=0.06)
    assert st.gap_at_survival(0.0) > 200.0


def test_bad_parameters():
    for kw in ({"horizon_s": 0}, {"window": -1}, {"prior": 1.5}, {"prior_weight": -1}):
        with pytest.raises(ValueError, match="ReturnModel"):
            ReturnModel(**kw)


def _one_shots_beside_a_conversation(until: float = 3000.0) -> list[Turn]:
    """User 0 talks every 40 s (answers of 40 tokens); a new one-shot user arrives every second
    with the same answer length and never returns."""
    turns = [Turn(0, float(t), 100, 40, r) for r, t in enumerate(range(0, int(until), 40))]
    turns += [Turn(1 + i, i + 0.5, 30, 40, 0) for i in range(int(until))]
    return sorted(turns, key=lambda t: t.time)


@pytest.mark.parametrize("name", ["bidaw", "bidaw-size"])
def test_returning_user_survives_a_one_shot_stream(name):
    log = prepare_accesses(_one_shots_beside_a_conversation(), kv_bytes_per_token=1,
                           max_kv_tokens=2048, kv_after_turn=True)
    cap = 2048 + 70 * 30  # the conversation plus 30 s of one-shots
    user0 = [i for i, u in enumerate(log.users) if u == 0]

    def run(horizon=120.0):
        p = make_policy(name, return_horizon_s=horizon)
        if hasattr(p, "set_capacity"):
            p.set_capacity(cap)
        r = replay(log, p, cap, 0, (2000.0, 3000.0), end_oracle=False)
        return r, p

    r, p = run()
    assert p.returns.probability() < 0.01            # the data: one-shots do not come back
    assert r.hits + r.misses == len([i for i in user0 if log.times[i] >= 2000.0])
    assert r.misses == 0 and r.hits >= 20            # user 0 never lost its KV
    # Without the return model (today's rule) the one-shots push user 0 out.
    old, _ = run(horizon=None)
    assert old.misses >= 20


@pytest.mark.parametrize("name", ["bidaw", "bidaw-size"])
def test_sessions_freed_at_their_end_do_not_teach(name):
    """With the end oracle the one-shots are freed, not evicted: they need no guess, so the
    model keeps its prior and the policy decides as without it."""
    log = prepare_accesses(_one_shots_beside_a_conversation(1500.0), kv_bytes_per_token=1,
                           kv_after_turn=True)
    res = []
    for horizon in (120.0, None):
        p = make_policy(name, return_horizon_s=horizon)
        if hasattr(p, "set_capacity"):
            p.set_capacity(3000)
        res.append(replay(log, p, 3000, 0, None, end_oracle=True).as_dict())
        if horizon is not None:
            assert p.returns.resolved <= 1 and p.returns.probability() > 0.9
    assert res[0] == res[1]


def test_everyone_returning_keeps_todays_deadlines():
    """While sessions come back, a one-turn session's stale deadline is the usual quantile: the
    policy decides exactly as without the model."""
    turns = [Turn(u, float(u * 7 + 30 * r), 20, 40, r) for u in range(300) for r in range(3)]
    turns.sort(key=lambda t: t.time)
    log = prepare_accesses(turns, kv_bytes_per_token=1, kv_after_turn=True)
    for name in ("bidaw", "bidaw-size"):
        res = []
        for kw in ({}, {"return_horizon_s": None}):
            p = make_policy(name, **kw)
            if hasattr(p, "set_capacity"):
                p.set_capacity(2000)
            res.append(replay(log, p, 2000, 0, None, end_oracle=False))
        assert res[0].hit_rate > 0.0 and res[0].as_dict() == res[1].as_dict(), name
