"""The promotion planner and what bidaw-prefetch exposes of its return-time model."""
from __future__ import annotations

import math

import pytest

from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.evicted_wait import EvictedWait
from kv_store.eviction.prefetch_planner import PrefetchPlanner


def test_soonest_expected_return_within_the_horizon_goes_first():
    p = PrefetchPlanner(horizon_s=10.0)
    p.evicted("a", (50.0, 90.0), now=0.0)
    p.evicted("b", (30.0, 200.0), now=0.0)
    assert p.next(10.0) is None            # b is expected at 30: not within 10 s of t=10
    assert p.eligible_at() == 20.0
    assert p.next(20.0) == "b"
    p.promoted("b")
    assert p.next(45.0) == "a"
    assert "b" not in p


def test_past_its_latest_return_a_candidate_is_dropped():
    p = PrefetchPlanner(horizon_s=10.0)
    p.evicted("a", (50.0, 90.0), now=0.0)
    assert p.next(95.0) is None
    assert "a" not in p
    p.evicted("b", (50.0, 90.0), now=100.0)          # evicted already past it: not a candidate
    assert "b" not in p
    p.evicted("a", (150.0, 190.0), now=100.0)        # never promoted: not blocked
    assert "a" in p


def test_a_promoted_session_that_does_not_return_is_blocked_until_it_does():
    p = PrefetchPlanner(horizon_s=10.0)
    p.evicted("a", (50.0, 90.0), now=0.0)
    assert p.next(45.0) == "a"
    p.promoted("a")
    p.evicted("a", (50.0, 90.0), now=60.0)  # pushed out again before its latest return
    assert "a" in p                          # still plausible: a candidate again
    assert p.next(95.0) is None              # its latest return passed without it
    p.evicted("a", (150.0, 190.0), now=100.0)
    assert "a" not in p                      # blocked, whatever its window says
    p.returned("a")
    p.evicted("a", (150.0, 190.0), now=100.0)
    assert p.next(145.0) == "a"


def test_a_session_whose_client_announces_its_turns_is_never_guessed_again():
    p = PrefetchPlanner(horizon_s=10.0)
    p.evicted("a", (20.0, 40.0), now=0.0)
    p.evicted("b", (25.0, 40.0), now=0.0)
    p.announced("a")  # its client said a turn was coming (a prepare)
    assert p.next(15.0) == "b"
    p.returned("a")
    p.evicted("a", (50.0, 90.0), now=30.0)  # pushed out again after its turn: still no guess
    assert "a" not in p and p.next(45.0) is None
    p.forget("a")  # the conversation ended; a new one under the same id is guessed again
    p.evicted("a", (70.0, 90.0), now=60.0)
    assert p.next(65.0) == "a"


def test_once_the_soonest_is_overdue_the_cheapest_due_goes_first():
    p = PrefetchPlanner(horizon_s=10.0)
    p.evicted("big", (20.0, 90.0), now=0.0, cost=500.0)
    p.evicted("small", (25.0, 90.0), now=0.0, cost=5.0)
    p.evicted("later", (60.0, 90.0), now=0.0, cost=1.0)   # not due: its cost does not count
    assert p.next(15.0) == "big"           # on time: the soonest expected first
    assert p.next(21.0) == "small"         # big is overdue: the disk is behind, cheapest first
    assert p.next(21.0, exclude={"small"}) == "big"   # refused: the next one
    assert p.next(21.0, exclude={"small", "big"}) is None
    p.promoted("small")
    assert p.next(21.0) == "big" and "small" not in p
    nocost = PrefetchPlanner(horizon_s=10.0)          # no cost: soonest first, overdue or not
    nocost.evicted("a", (20.0, 90.0), now=0.0)
    nocost.evicted("b", (25.0, 90.0), now=0.0)
    assert nocost.next(21.0) == "a"


def test_negative_horizon_is_refused():
    with pytest.raises(ValueError, match="horizon"):
        PrefetchPlanner(-1.0)


def _policy() -> BidawPrefetchPolicy:
    pol = BidawPrefetchPolicy(protect_queue=0)
    pol.set_capacity(1000, 0)
    return pol


def test_return_window_is_the_eviction_model_turned_around():
    pol = _policy()
    pol.admit("u", 100, 0.0)
    pol.observe_answer("u", 200, 0.0)
    pol.touch("u", 300, 40.0)
    pol.observe_answer("u", 200, 41.0)
    s = pol._sessions.get("u")
    q = pol.think.stats(200).quantiles   # the very model the policy evicts with
    f = math.exp(s.pace)
    assert s.pace != 0.0
    lo, hi = pol.return_window("u")
    assert lo == pytest.approx(41.0 + q[0.5] * f)
    assert hi == pytest.approx(41.0 + q[0.9] * f)
    assert pol.return_window("unknown") is None


def test_promotion_enters_without_an_access():
    pol = _policy()
    pol.admit("u", 100, 0.0)
    pol.observe_answer("u", 50, 0.0)
    pol.remove("u")
    before = [list(h) for h in pol.think._hist]
    pol.admit_prefetched("u", 100, 30.0)
    assert "u" in pol
    assert pol._sessions.get("u").last == 0.0          # the idle clock keeps running
    assert [list(h) for h in pol.think._hist] == before  # no think time learned
    pol.touch("u", 100, 45.0)                           # the real return: learned from t=0
    assert [list(h) for h in pol.think._hist] != before


def test_promotion_takes_dram_only_from_entries_ranked_less_likely_to_be_hit():
    pol = _policy()
    for key, answer in (("soon", 8), ("late", 320)):
        pol.admit(key, 100, 0.0)
        pol.observe_answer(key, answer, 0.0)
    pol.remove("soon")                     # 'soon' on SSD, expected back at ~29 s
    size_of = {"late": 100, "late2": 100, "sooner": 100}.get
    assert pol.prefetch_allowed("soon", 100, 5.0, 100, size_of)      # 'late': ~270 s away
    pol.admit("late2", 100, 0.0)
    pol.observe_answer("late2", 320, 0.0)
    assert pol.prefetch_allowed("soon", 100, 5.0, 200, size_of)
    pol.remove("late")
    pol.remove("late2")
    pol.admit("sooner", 100, 4.0)
    pol.observe_answer("sooner", 0, 4.0)  # expected back at ~28 s: likelier than 'soon'
    assert not pol.prefetch_allowed("soon", 100, 5.0, 100, size_of)
    assert pol._victim is None             # a look: no eviction recorded


def test_bad_quantiles_are_refused():
    with pytest.raises(ValueError, match="quantile"):
        BidawPrefetchPolicy(return_quantile=0.9, high_quantile=0.5)


def test_a_promotion_not_back_by_its_high_quantile_goes_first():
    pol = _policy()
    for key, answer in (("guess", 8), ("other", 8)):
        pol.admit(key, 100, 0.0)
        pol.observe_answer(key, answer, 0.0)
    pol.remove("guess")
    pol.admit_prefetched("guess", 100, 20.0)
    latest = pol.return_window("guess")[1]
    assert pol.victim(latest - 1.0) == "other"   # inside its window: ranked as bidaw-size would
    assert pol.victim(latest + 0.5) == "guess"   # past it: the failed guess goes first
    pol.touch("guess", 100, latest + 1.0)        # it came back after all: ranked afresh
    pol.observe_answer("guess", 8, latest + 1.0)
    assert pol.victim(latest + 2.0) == "other"



def test_a_disk_full_of_demand_reads_ranks_small_entries_higher():
    # a: 1000 B, short answer (back in ~29 s by the prior); b: 10 B, long answer (~148 s).
    # b's wait is ~5x a's and a is 100x larger: with bidaw-size's beta 0.2 (100^0.2 = 2.5 < 5)
    # b goes first, and so it does in bidaw-prefetch while no disk load is reported; once
    # demand reads have filled the disk, beta nears 0.7 (100^0.7 = 25 > 5) and a goes first.
    from kv_store.eviction.bidaw_size import BidawSizePolicy

    def fill(pol):
        for key, size, answer in (("a", 1000, 12), ("b", 10, 192)):
            pol.admit(key, size, 0.0)
            pol.observe_answer(key, answer, 0.0)
        return pol

    idle = fill(BidawPrefetchPolicy(protect_queue=0))
    ratio = (idle.expected_remaining(idle._sessions.get("b"), 1.0)
             / idle.expected_remaining(idle._sessions.get("a"), 1.0))
    assert 100 ** 0.2 < ratio < 100 ** 0.7 / 2
    assert fill(BidawSizePolicy(protect_queue=0)).victim(1.0) == "b"
    assert idle.victim(1.0) == "b" and idle.size_exponent == 0.2
    busy = fill(BidawPrefetchPolicy(protect_queue=0))
    busy.observe_demand_read(-899.0, 1.0)        # busy for 3 time constants: share 0.95
    assert busy.size_exponent == pytest.approx(0.2 + 0.5 * (1 - math.exp(-3)))
    assert busy.victim(1.0) == "a"
    fixed = fill(BidawPrefetchPolicy(protect_queue=0, loaded_size_exponent=None))
    fixed.observe_demand_read(-899.0, 1.0)
    assert fixed.size_exponent == 0.2 and fixed.victim(1.0) == "b"


def test_demand_share_weighs_recent_busy_time():
    from kv_store.eviction.disk_share import DemandShare

    d = DemandShare(tau_s=100.0)
    assert d.share(0.0) == 0.0
    d.read(0.0, 100.0)                                   # busy the last 100 s: 1 - e^-1
    assert d.share(100.0) == pytest.approx(1 - math.exp(-1))
    assert d.share(200.0) == pytest.approx((1 - math.exp(-1)) * math.exp(-1))  # idle since
    d.read(200.0, 300.0)
    assert d.share(300.0) == pytest.approx((1 - math.exp(-1)) * (1 + math.exp(-2)))
    d.read(250.0, 250.0)                                 # empty: nothing
    assert d.share(300.0) == pytest.approx((1 - math.exp(-1)) * (1 + math.exp(-2)))
    with pytest.raises(ValueError):
        DemandShare(0.0)


def test_a_horizon_given_per_call_decides_when_a_candidate_is_due():
    p = PrefetchPlanner(horizon_s=30.0)
    p.evicted("a", (50.0, 90.0), now=0.0)
    assert p.eligible_at() == 20.0 and p.eligible_at(10.0) == 40.0
    assert p.next(30.0, horizon_s=10.0) is None     # expected at 50: 20 s away, horizon 10 s
    assert p.next(40.0, horizon_s=10.0) == "a"
    p.promoted("a")
    p.evicted("b", (100.0, 150.0), now=41.0)
    assert p.next(70.0, horizon_s=30.0) == "b"      # due at the wider horizon ...
    assert p.next(71.0, horizon_s=5.0) == "b"       # ... stays due when it shrinks


def test_a_disk_full_of_demand_reads_shortens_the_promotion_horizon():
    # horizon_s with an idle disk, loaded_horizon_s with one full of demand reads, the share
    # of the recent disk time they took in between (the share bidaw-size's beta follows)
    idle = BidawPrefetchPolicy(horizon_s=30.0, loaded_horizon_s=5.0)
    assert idle.prefetch_horizon(1.0) == 30.0
    busy = BidawPrefetchPolicy(horizon_s=30.0, loaded_horizon_s=5.0)
    busy.observe_demand_read(-899.0, 1.0)        # busy for 3 time constants: share 0.95
    share = 1 - math.exp(-3)
    assert busy.prefetch_horizon(1.0) == pytest.approx(30.0 - 25.0 * share)
    assert busy.prefetch_horizon(301.0) == pytest.approx(30.0 - 25.0 * share / math.e)  # idle since
    fixed = BidawPrefetchPolicy(horizon_s=30.0, loaded_horizon_s=None)
    fixed.observe_demand_read(-899.0, 1.0)
    assert fixed.prefetch_horizon(1.0) == 30.0


def test_evicted_wait_is_the_geometric_mean_of_recent_waits():
    w = EvictedWait(weight=0.5)
    assert w.typical() is None
    w.observe(100.0)
    assert w.typical() == pytest.approx(100.0)
    w.observe(25.0)                                   # halfway in logs: sqrt(100 * 25)
    assert w.typical() == pytest.approx(50.0)
    w.observe(0.001)                                  # due now counts as one second
    assert w.typical() == pytest.approx(math.sqrt(50.0))
    with pytest.raises(ValueError, match="weight"):
        EvictedWait(weight=0.0)


def _evict(pol: BidawPrefetchPolicy, now: float) -> tuple[str, float]:
    """Evict the policy's victim at `now`, as a tier's room-making does; its expected wait."""
    key = pol.victim(now)
    wait = pol.expected_remaining(pol._sessions.get(key), now)
    pol.remove(key)
    return key, wait


def test_scarce_dram_caps_the_horizon_at_half_the_wait_of_what_it_evicts():
    pol = _policy()
    for key in ("a", "b", "c"):
        pol.admit(key, 100, 0.0)
        pol.observe_answer(key, 8, 0.0)               # expected back within about 30 s
    pol.remove("c")                                   # freed, not evicted: says nothing
    assert pol.prefetch_horizon(5.0) == 30.0          # nothing evicted yet: the disk's horizon
    size_of = {"a": 100, "b": 100}.get
    pol.prefetch_victims("c", 5.0, 100, size_of)     # a look (weighs 'a', refuses): no eviction
    pol.remove("b")
    assert pol.prefetch_horizon(5.0) == 30.0
    key, wait = _evict(pol, 5.0)
    assert key == "a" and wait < 60.0
    assert pol.prefetch_horizon(5.0) == pytest.approx(0.5 * wait)
    off = BidawPrefetchPolicy(protect_queue=0, evicted_wait_share=None)
    off.set_capacity(1000, 0)
    off.admit("a", 100, 0.0)
    off.observe_answer("a", 8, 0.0)
    _evict(off, 5.0)
    assert off.prefetch_horizon(5.0) == 30.0


def test_an_entry_evicted_as_ended_says_nothing_of_dram_scarcity():
    pol = _policy()
    pol.admit("gone", 100, 0.0)
    pol.observe_answer("gone", 8, 0.0)
    key, _ = _evict(pol, 5000.0)                     # silent far past any return: ended
    assert key == "gone"
    assert pol.evicted_wait.typical() is None and pol.prefetch_horizon(5000.0) == 30.0


def test_a_candidate_is_due_at_the_instant_eligible_at_names():
    # expected - horizon == now while now + horizon < expected, in floating point: woken at
    # eligible_at, a caller must find it due (the timed simulator re-armed at the same instant
    # for ever)
    horizon, now = 25.164003546972253, 5099.714174211174
    expected = 5124.878177758147
    assert expected - horizon == now and not expected <= now + horizon
    p = PrefetchPlanner(horizon_s=30.0)
    p.evicted("a", (expected, expected + 60.0), now=0.0)
    assert p.eligible_at(horizon) == now
    assert p.next(now, horizon_s=horizon) == "a"
