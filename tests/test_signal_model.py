"""SignalModel (does the answer predict this user's return?) on users whose answer is known, and
bidaw-size's per-user fallback on hand-made sessions: a script that finished goes first, a
script that is still running is kept, a reading user is ranked as before."""
from __future__ import annotations

import math
import random

import pytest

from kv_store.eviction.bidaw_size import BidawSizePolicy
from kv_store.eviction.signal_model import SignalModel, UserSignal

S_PER_TOKEN = 0.6


def _feed(model: SignalModel, gaps_answers, predict=lambda a: S_PER_TOKEN * a) -> UserSignal:
    u = UserSignal()
    for gap, answer in gaps_answers:
        model.observe(u, gap, math.log(predict(answer)))
    return u


def _answers(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [int(rng.lognormvariate(math.log(60), 0.8)) + 5 for _ in range(n)]


def test_reader_whose_gaps_follow_answers_stays_on_the_answer_model():
    m = SignalModel()
    rng = random.Random(1)
    answers = _answers(20, 1)
    u = _feed(m, [(S_PER_TOKEN * a * rng.lognormvariate(0, 0.2), a) for a in answers])
    assert u.n == 20
    assert u.err_answer < u.err_flat          # the answer explains the gaps
    assert not m.flat(u)


def test_shuffled_reader_is_not_regular_so_it_keeps_the_population_tail():
    m = SignalModel()
    rng = random.Random(2)
    answers = _answers(30, 2)
    # gaps of a reader, but paired with someone else's answers: no signal, and a wide spread
    gaps = [S_PER_TOKEN * a for a in _answers(30, 3)]
    rng.shuffle(gaps)
    u = _feed(m, list(zip(gaps, answers)))
    assert m.spread(u) > 0.3
    assert not m.flat(u)


def test_machine_paced_user_is_flat_after_min_obs_gaps():
    m = SignalModel()
    answers = _answers(12, 4)
    u = UserSignal()
    for i, a in enumerate(answers):
        assert m.flat(u) == (i >= m.min_obs), i
        m.observe(u, 1.0, math.log(S_PER_TOKEN * a))
    assert m.spread(u) == 0.0 and u.err_flat == 0.0 < u.err_answer
    assert m.center_s(u) == pytest.approx(1.0)
    # ended once idle beyond tail_z floored spreads: seconds, not a reader's minutes
    assert m.deadline_s(u) == pytest.approx(math.exp(3.0 * 0.1))


def test_regular_slow_script_and_fast_jittery_agent_are_flat():
    m = SignalModel()
    answers = _answers(10, 5)
    assert m.flat(_feed(m, [(30.0, a) for a in answers]))     # regular: spread 0
    rng = random.Random(6)
    agent = _feed(m, [(rng.uniform(0.5, 2.5), a) for a in answers])
    assert 0.02 < m.spread(agent) <= 0.5 and m.center_s(agent) < 3.0
    assert m.flat(agent)                                       # fast: near-zero think time
    # the same jitter at reading speed is a human's irregularity: not flat
    assert not m.flat(_feed(m, [(20 * rng.uniform(0.5, 2.5), a) for a in answers]))


def test_regular_gaps_the_answer_model_predicts_better_are_not_a_fallback():
    m = SignalModel()
    # every answer is 50 tokens and every gap 30 s: the answer model is exact, so stays
    u = _feed(m, [(30.0, 50)] * 8, predict=lambda a: 30.0)
    assert u.err_answer == 0.0 and not m.flat(u)


@pytest.mark.parametrize("kwargs", [{"min_obs": 1}, {"decay": 1.0}, {"max_spread": 0},
                                    {"tail_z": 0}, {"fast_s": -1}, {"min_spread": -0.1}])
def test_bad_parameters_are_refused(kwargs):
    with pytest.raises(ValueError, match="SignalModel needs"):
        SignalModel(**kwargs)


def _session(p: BidawSizePolicy, key, times, answers, size: int) -> None:
    for t, a in zip(times, answers):
        p.touch(key, size, t)
        p.observe_answer(key, a, t)


@pytest.mark.parametrize("per_user_signal", [True, False])
def test_bidaw_size_evicts_a_finished_script_first_and_keeps_a_running_one(per_user_signal):
    p = BidawSizePolicy(per_user_signal=per_user_signal, protect_queue=0)
    rng = random.Random(7)
    # warm-up, as on a half machine-paced trace: readers (gap = 0.6 s/token × answer) and
    # scripts (1 s gaps, 12 turns) teach the population's think-time model
    for u in range(40):
        t = 1000.0 * u
        for a in _answers(8, 100 + u):
            p.touch(("reader", u), 1 << 20, t)
            p.observe_answer(("reader", u), a, t)
            t += S_PER_TOKEN * a * rng.lognormvariate(0, 0.2)
        p.remove(("reader", u))
        _session(p, ("script", u), [t + i for i in range(12)], _answers(12, 200 + u), 1 << 20)
        p.remove(("script", u))
    start = 50_000.0
    # a reader that just read an answer, and a script (1 s gaps, same answers) still running
    _session(p, "reader", [start, start + 40.0], [60, 60], 1 << 30)
    _session(p, "script", [start + 30 + i for i in range(12)], [60] * 12, 1 << 30)
    now = start + 41.5                   # the script's next turn is due any moment
    assert p.victim(now) == "reader"
    # the script stops; 20 s later it is past its own deadline, the reader still reading
    now = start + 61.0
    assert p.victim(now) == ("script" if per_user_signal else "reader")


def test_ablation_switches_take_the_signal_away():
    def two_readers(**kw):
        p = BidawSizePolicy(protect_queue=0, **kw)
        for key, answer in (("short", 10), ("long", 400)):
            p.touch(key, 1 << 20, 0.0)
            p.observe_answer(key, answer, 0.0)
        return p, p._sessions.get("short"), p._sessions.get("long")

    p, short, long_ = two_readers()
    assert p.expected_remaining(long_, 5.0) > 2 * p.expected_remaining(short, 5.0)
    # answer length off: one think-time distribution, the same wait whatever the answer
    p, short, long_ = two_readers(answer_signal=False)
    assert p.expected_remaining(long_, 5.0) == p.expected_remaining(short, 5.0)
    # idle time off: the whole predicted gap, however long the session has been idle
    p, short, long_ = two_readers(idle_signal=False)
    assert p.expected_remaining(long_, 5.0) == p.expected_remaining(long_, 500.0) > 0
    p, short, long_ = two_readers()
    assert p.expected_remaining(long_, 5.0) != p.expected_remaining(long_, 500.0)
