"""SessionEndModel: the learned chance that a conversation has another turn, and its use by
bidaw-prefetch's options (end_after_s, victim_margin)."""
from __future__ import annotations

import pytest

from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.session_end_model import SessionEndModel, turn_bucket


def test_learns_per_turn_count_who_comes_back():
    m = SessionEndModel(end_after_s=100.0, window=1e9, prior=0.5, prior_weight=2.0)
    t = 0.0
    for i in range(40):       # after turn 1 everyone comes back; after turn 2 nobody does
        key = f"u{i}"
        m.finished(key, 1, t)
        m.returned(key, t + 10.0)
        m.finished(key, 2, t + 11.0)
        t += 1.0
    m.finished("late", 1, t + 500.0)  # expires the turn-2 entries: each counts 0
    assert m.probability(1) == pytest.approx(41.0 / 42.0)
    assert m.probability(2) == pytest.approx(1.0 / 42.0)
    assert m.probability(3) == pytest.approx(0.5)  # never seen: the prior
    assert len(m) == 1


def test_announced_ends_and_late_returns_are_not_counted():
    m = SessionEndModel(end_after_s=100.0, window=1e9, prior=0.5, prior_weight=2.0)
    m.finished("a", 1, 0.0)
    m.forget("a")                      # the end oracle freed it: no guess needed
    m.finished("b", 1, 0.0)
    m.returned("b", 150.0)             # expired at 100 s (counted 0), the late return ignored
    assert m.probability(1) == pytest.approx(1.0 / 3.0)


def test_chance_falls_with_the_silence():
    m = SessionEndModel(prior=0.9, prior_weight=1.0)
    assert m.chance(1, 1.0) == pytest.approx(0.9)
    assert m.chance(1, 0.1) == pytest.approx(0.09 / 0.19)
    assert m.chance(1, 0.0) == 0.0
    assert m.chance(1, 1.0) > m.chance(1, 0.5) > m.chance(1, 0.1)


def test_turn_buckets_are_geometric():
    assert [turn_bucket(k) for k in (0, 1, 2, 4, 5, 6, 7, 22, 23, 100)] == [0, 0, 1, 3, 4, 4, 5, 7, 8, 9]


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="SessionEndModel"):
        SessionEndModel(end_after_s=0.0)


def _policy(**kw) -> BidawPrefetchPolicy:
    pol = BidawPrefetchPolicy(protect_queue=0, **kw)
    pol.set_capacity(1000, 0)
    return pol


def test_without_an_end_model_every_session_counts_as_returning():
    pol = _policy(end_after_s=None)
    assert pol.ends is None
    pol.admit("u", 100, 0.0)
    pol.observe_answer("u", 50, 0.0)
    assert pol.return_chance(pol._sessions.get("u"), 1e6) == 1.0
    with_model = _policy()
    with_model.admit("u", 100, 0.0)
    with_model.observe_answer("u", 50, 0.0)
    s = with_model._sessions.get("u")
    assert with_model.return_chance(s, 1e6) < with_model.return_chance(s, 1.0) <= 1.0


def test_sessions_that_end_after_one_turn_are_no_candidates():
    pol = _policy(end_after_s=100.0, min_return_chance=0.5)
    t = 0.0
    for i in range(300):                  # one-shot traffic: nobody comes back
        pol.admit(f"x{i}", 100, t)
        pol.observe_answer(f"x{i}", 50, t)
        pol.remove(f"x{i}")               # evicted (not the victim: forgotten uncounted) ...
        t += 1.0
    assert pol.ends.probability(1) == pytest.approx(0.9)  # ... so the prior is unchanged
    for i in range(300):
        pol.admit(f"y{i}", 100, t)
        pol.observe_answer(f"y{i}", 50, t)
        t += 1.0
    pol.admit("z", 100, t + 200.0)        # every y expired unanswered: counted as ended
    assert pol.ends.probability(1) < 0.1
    pol.observe_answer("z", 50, t + 200.0)
    assert pol.return_window("z") is None
    assert _policy().return_window("z") is None  # unknown to a fresh policy
    back = _policy(end_after_s=100.0)     # where users do come back it stays a candidate
    back.admit("z", 100, 0.0)
    back.observe_answer("z", 50, 0.0)
    assert back.return_window("z") is not None


def test_victim_margin_refuses_a_close_trade():
    def setup(margin):
        pol = _policy(victim_margin=margin)
        for key, answer in (("soon", 8), ("late", 320)):
            pol.admit(key, 100, 0.0)
            pol.observe_answer(key, answer, 0.0)
        pol.remove("soon")
        return pol
    size_of = {"late": 100}.get
    assert setup(1.0).prefetch_allowed("soon", 100, 5.0, 100, size_of)
    assert not setup(1000.0).prefetch_allowed("soon", 100, 5.0, 100, size_of)


def _promoted(pol, key="p", answer=8):
    pol.admit(key, 100, 0.0)
    pol.observe_answer(key, answer, 0.0)
    pol.remove(key)                       # evicted ...
    pol.admit_prefetched(key, 100, 5.0)   # ... and promoted back before its return
    return pol


def test_a_promoted_session_in_its_window_goes_only_when_nothing_else_can():
    pol = _promoted(_policy())
    latest = pol._window(pol._sessions.get("p"))[1]
    pol.admit("kept", 100, 0.0)
    pol.observe_answer("kept", 0, 0.0)    # due sooner than 'p' is, at first ...
    at = latest - 1.0                     # ... but by now idle long: its mean excess is large
    assert pol.victim(at) == "kept"
    assert pol.victim(at, {"kept"}) == "p"  # nothing else: the promotion goes
    assert _promoted(_policy(keep_promoted=False)).victim(at) is not None
    pol.touch("p", 100, at)               # back: an ordinary entry again
    assert "p" not in pol._awaited


def test_a_promotion_counts_as_ended_by_its_learned_chance_of_returning():
    # everybody has been seen to come back: a promotion not back is kept past its window
    kept = _policy(end_after_s=100.0)
    for i in range(300):
        kept.admit(f"r{i}", 100, float(i))
        kept.observe_answer(f"r{i}", 8, float(i))
        kept.touch(f"r{i}", 100, i + 20.0)
    assert kept.ends.probability(1) > 0.99
    kept.admit("p", 100, 500.0)
    kept.observe_answer("p", 8, 500.0)
    kept.remove("p")
    kept.admit_prefetched("p", 100, 505.0)
    s = kept._sessions.get("p")
    window_end = kept._window(s)[1]
    assert kept._stale.priority("p")[0] > window_end
    # where most sessions end after their first turn, it goes first at the window's end
    ends = _policy(end_after_s=100.0)
    for i in range(300):
        ends.admit(f"y{i}", 100, float(i))
        ends.observe_answer(f"y{i}", 8, float(i))
    t = 1000.0
    ends.admit("p", 100, t)
    ends.observe_answer("p", 8, t)
    assert ends.ends.probability(1) < ends.min_return_chance
    ends.remove("p")
    ends.admit_prefetched("p", 100, t + 5.0)
    assert ends._stale.priority("p")[0] == pytest.approx(ends._window(ends._sessions.get("p"))[1])


def test_a_session_more_likely_ended_than_not_goes_stale_sooner():
    def trained(stale_chance, after_window=False):
        pol = _policy(end_after_s=100.0, stale_chance=stale_chance,
                      chance_after_window=after_window)
        t = 0.0
        for i in range(300):              # a third of the sessions never have a third turn
            key, gap = f"y{i}", 5.0 + 10.0 * (i % 8)   # think times spread over 5..75 s
            pol.admit(key, 100, t)
            pol.observe_answer(key, 50, t)
            pol.touch(key, 100, t + gap)
            pol.observe_answer(key, 50, t + gap)
            if i % 3:
                pol.touch(key, 100, t + 2 * gap)
            t += 1.0
        pol.admit("z", 100, t + 200.0)    # the last ones expire: counted
        pol.observe_answer("z", 50, t + 200.0)
        pol.touch("z", 100, t + 220.0)
        pol.observe_answer("z", 50, t + 220.0)
        return pol, pol._stale.priority("z")[0]
    pol, sooner = trained(0.5)
    assert pol.ends.probability(2) < 0.8
    _, q99 = trained(None)                # bidaw-size's rule: the think time's q99
    assert sooner < q99 - 10.0
    assert trained(0.01)[1] == q99        # a threshold that never binds changes nothing
    # by default never before the window's end: here p's deadline (the q50) is sooner than it
    pol, floored = trained(0.5, after_window=True)
    s = pol._sessions.get("z")
    assert floored == pytest.approx(pol._window(s)[1]) and sooner < floored


def test_where_most_sessions_end_the_chance_waits_for_the_silence():
    # Nobody has come back after one turn (p(1) < 0.1): the chance of a one-turn session is
    # below one half the moment its turn is done. The old rule made it stale at once (its
    # second turn, if it comes, misses); by default it goes first only once idle past its
    # return window (q90 at its pace), and until then ranks by its wait like the others.
    def trained(**kw):
        pol = _policy(end_after_s=100.0, **kw)
        t = 0.0
        for i in range(300):
            pol.admit(f"y{i}", 100, t)
            pol.observe_answer(f"y{i}", 50, t)
            t += 1.0
        t += 200.0                        # every y expired unanswered: counted as ended
        for key, answer in (("w", 320), ("z", 8)):
            pol.admit(key, 100, t)        # w: two turns (p(2) the prior 0.9), long answer
            pol.observe_answer(key, answer, t)
        pol.touch("w", 100, t + 1.0)
        pol.observe_answer("w", 320, t + 1.0)
        return pol, t
    ended = {f"y{i}" for i in range(300)}  # still held, long stale: not what is compared
    pol, t = trained()
    assert pol.ends.probability(1) < 0.1 and pol.ends.probability(2) == pytest.approx(0.9)
    z = pol._sessions.get("z")
    assert pol._stale.priority("z")[0] == pytest.approx(pol._window(z)[1])
    assert pol.victim(t + 2.0, ended) == "w"     # w's wait is the longer: it goes, z stays
    assert pol.victim(pol._window(z)[1] + 1.0, ended) == "z"  # past its window: ended
    old, t = trained(chance_after_window=False)
    assert old._stale.priority("z")[0] <= t + 1.0
    assert old.victim(t + 2.0, ended) == "z"


def test_learns_per_answer_length_shrunk_towards_the_turn_count():
    # after one turn, users leave after a 2-token answer and come back after a 100-token one:
    # the turns bucket alone says 1/2; each cell says its own, pulled towards 1/2 by 2 sessions
    def trained(**kw):
        m = SessionEndModel(end_after_s=100.0, window=1e9, prior=0.5, prior_weight=2.0, **kw)
        for i in range(4):
            m.finished(f"short{i}", 1, 0.0, answer=2)
            m.finished(f"long{i}", 1, 0.0, answer=100)
            m.returned(f"long{i}", 10.0)
        m.finished("late", 1, 500.0)      # the short ones expire unanswered: ended
        return m
    m = trained(answer_shrink=2.0)
    assert m.probability(1) == pytest.approx(5.0 / 10.0)
    assert m.probability(1, answer=2) == pytest.approx((0.0 + 2 * 0.5) / (4 + 2))
    assert m.probability(1, answer=100) == pytest.approx((4.0 + 2 * 0.5) / (4 + 2))
    assert m.probability(1, answer=30) == pytest.approx(0.5)   # a bucket never seen
    assert m.chance(1, 0.5, answer=2) < m.chance(1, 0.5) < m.chance(1, 0.5, answer=100)
    off = trained(answer_shrink=None)     # the previous rule: the turn count alone
    assert off.probability(1, answer=2) == off.probability(1, answer=100) == pytest.approx(0.5)


def test_a_session_whose_answer_usually_ends_it_is_no_candidate():
    def trained(**kw):
        pol = _policy(end_after_s=100.0, **kw)
        t = 0.0
        for i in range(300):              # after a 2-token answer nobody comes back,
            key = f"y{i}"                 # after a 50-token one everybody does
            answer = 2 if i % 2 else 50
            pol.admit(key, 100, t)
            pol.observe_answer(key, answer, t)
            if not i % 2:
                pol.touch(key, 100, t + 20.0)
            t += 1.0
        t += 200.0                        # every short one expired unanswered: ended
        for key, answer in (("short", 2), ("long", 50)):
            pol.admit(key, 100, t)
            pol.observe_answer(key, answer, t)
        return pol
    pol = trained()
    assert pol.return_window("short") is None
    assert pol.return_window("long") is not None
    old = trained(end_answer_shrink=None)  # per turns only: p ~ 1/2 for both, neither
    assert old.return_window("short") is None and old.return_window("long") is None


def test_learns_per_pace_within_an_answer_bucket():
    # same turn count and answer: users slower than the model's median leave, faster ones stay
    def trained(**kw):
        m = SessionEndModel(end_after_s=100.0, window=1e9, prior=0.5, prior_weight=2.0,
                            answer_shrink=2.0, **kw)
        for i in range(4):
            m.finished(f"slow{i}", 1, 0.0, answer=50, pace=0.5)
            m.finished(f"fast{i}", 1, 0.0, answer=50, pace=-0.5)
            m.returned(f"fast{i}", 10.0)
        m.finished("late", 1, 500.0)
        return m
    m = trained()
    assert m.probability(1, answer=50, pace=0.5) == pytest.approx((0.0 + 2 * 0.5) / (4 + 2))
    assert m.probability(1, answer=50, pace=-0.5) == pytest.approx((4.0 + 2 * 0.5) / (4 + 2))
    assert m.probability(1, answer=50, pace=0.1) == pytest.approx(0.5)  # a class never seen
    off = trained(pace_edges=None)        # the answer alone: both in one cell, 4 of 8 back
    assert (off.probability(1, answer=50, pace=0.5) == off.probability(1, answer=50, pace=-0.5)
            == pytest.approx((4.0 + 2 * 0.5) / (8 + 2)))


def test_a_user_slower_than_usual_is_likelier_to_have_ended():
    # two turns each, 50-token answers: users whose gap was 200 s (slow: pace > 0.2 against
    # the learned median) never come back again, those whose gap was 2 s (fast) always do
    def session(pol, key, gap, t):
        pol.admit(key, 100, t)
        pol.observe_answer(key, 50, t)
        pol.touch(key, 100, t + gap)
        pol.observe_answer(key, 50, t + gap)

    def trained(**kw):
        pol = _policy(end_after_s=100.0, **kw)
        t = 0.0
        for i in range(300):
            slow = i % 2
            session(pol, f"y{i}", 200.0 if slow else 2.0, t)
            if not slow:
                pol.touch(f"y{i}", 100, t + 20.0)
            t += 1.0
        t += 500.0                         # every slow one expired unanswered: ended
        session(pol, "slow", 200.0, t)
        session(pol, "fast", 2.0, t + 190.0)
        return pol
    pol = trained()
    slow, fast = pol._sessions.get("slow"), pol._sessions.get("fast")
    assert slow.pace > 0.2 and fast.pace < -0.2
    assert pol.return_window("slow") is None and pol.return_window("fast") is not None
    old = trained(end_pace_edges=None)    # the answer alone: one cell, half come back
    assert old.ends.probability(2, 50, slow.pace) == old.ends.probability(2, 50, fast.pace)
