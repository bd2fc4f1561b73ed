"""Where demand reads fill the disk and bidaw-prefetch does not promote, its eviction is
bidaw-size's, decision for decision (issue 18: no worse than bidaw-size at the trace's pace).
The two learn the same returns; bidaw-prefetch hears each at its arrival, bidaw-size at the
access once the KV is read. On a saturated disk the ranking's models learn at the access too
(arrival_learning.py), so the same gaps reach the same models at the same moments."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.sim import cache_bandwidth as cb
from bench.sim.cache import prepare_accesses
from bench.traces import load_trace
from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.bidaw_size import BidawSizePolicy
from kv_store.eviction.registry import make_policy

GIB = 1 << 30
MIB = 1 << 20
_ON_EVICT = cb._SsdReplay.on_evict


def _evictions(monkeypatch, name: str, **kw) -> tuple[list, object]:
    """Every eviction (time, key) of `name` replaying the sample trace (300 s) on 6 GiB of DRAM
    and a 0.2 GB/s disk: demand reads queue for minutes, the disk is busy with them (a share of
    0.99 at the end, measured over the last ~20 s)."""
    log = prepare_accesses(load_trace(Path(__file__).parent / "data" / "bidaw_sample.txt"))
    out: list = []

    def spy(self, key):
        out.append((round(self.clock, 6), key))
        _ON_EVICT(self, key)

    monkeypatch.setattr(cb._SsdReplay, "on_evict", spy)
    policy = make_policy(name, 6 * GIB, GIB, demand_tau_s=20.0, **kw)
    res = cb.replay_bandwidth(log, policy, 6 * GIB, 0.2, 1.0, GIB, None, end_oracle=True)
    return out, res, policy


def test_not_promoting_on_a_saturated_disk_it_evicts_as_bidaw_size(monkeypatch):
    size, size_res, _ = _evictions(monkeypatch, "bidaw-size")
    # min_return_chance > 1: no session is ever a candidate, so nothing is promoted;
    # access_share=0: the ranking learns at the access from the first read on (by default only
    # once the share passes 0.97, which this short trace reaches after its first reads)
    same, res, policy = _evictions(monkeypatch, "bidaw-prefetch", min_return_chance=1.01,
                                   access_share=0.0)
    assert res.prefetches == 0 and policy.demand.share(size[-1][0]) > 0.9
    assert len(size) > 100 and size_res.misses > 100   # a real contest, not an empty one
    assert same == size
    assert (res.hits, res.misses, res.ssd_read_bytes) == (
        size_res.hits, size_res.misses, size_res.ssd_read_bytes)
    # the first version learnt every return at its arrival: the rankings part
    first, _, _ = _evictions(monkeypatch, "bidaw-prefetch", min_return_chance=1.01,
                             access_share=None)
    assert len(first) > 100
    assert first != size


def _saturated(policy):
    policy.observe_demand_read(-3000.0, 200.0)  # ten time constants of demand reads: share ~1
    return policy


def _answered(*policies, n=70):
    """`n` sessions answer 10 tokens at t=0 in each policy (a think-time prior near 28 s)."""
    for p in policies:
        for i in range(n):
            p.admit(i, MIB, 0.0)
            p.observe_answer(i, 10, 0.0)


def test_on_a_saturated_disk_a_return_is_learnt_at_the_access_from_its_arrival():
    # each session's next turn arrives at 100 and is read later; the prefetching policy hears
    # the arrival at 100 but learns the 100 s gap only at the access, as bidaw-size does (its
    # access carries the arrival, as the replay's does)
    size, pref = _saturated(BidawSizePolicy()), _saturated(BidawPrefetchPolicy())
    _answered(size, pref)
    before = pref.think.stats(10).quantiles[0.5]
    for i in range(70):
        pref.observe_arrival(i, 100.0)
    assert pref.think.stats(10).quantiles[0.5] == before          # not yet
    assert pref._sessions.get(0).last == 100.0 and pref._sessions.get(0).answer is None
    for i in range(70):
        for p in (size, pref):
            p.touch(i, MIB, 100.0)
    assert pref.think.stats(10).quantiles == size.think.stats(10).quantiles
    assert pref.think.stats(10).quantiles[0.5] > before + 30
    assert pref._sessions.get(0).pace == pytest.approx(size._sessions.get(0).pace)


def test_with_an_idle_disk_a_return_is_learnt_at_its_arrival():
    # where promotion runs, it predicts arrivals and learns them as they come (the first
    # version's rule; `access_share`=0 defers always, as on a saturated disk)
    idle, deferred = BidawPrefetchPolicy(), BidawPrefetchPolicy(access_share=0.0)
    _answered(idle, deferred)
    before = idle.think.stats(10).quantiles[0.5]
    for i in range(70):
        for p in (idle, deferred):
            p.observe_arrival(i, 100.0)
    assert idle.think.stats(10).quantiles[0.5] > before + 30
    assert deferred.think.stats(10).quantiles[0.5] == before


def test_a_second_turn_before_the_first_is_read_is_the_one_the_access_learns():
    # the replay merges a turn that arrives while the previous one's read is queued into that
    # read, whose access carries the later arrival: bidaw-size learns that gap, and so must
    # the prefetching policy (else their paces part)
    size, pref = _saturated(BidawSizePolicy()), _saturated(BidawPrefetchPolicy())
    _answered(size, pref)
    for i in range(70):
        pref.observe_arrival(i, 30.0)
        pref.observe_arrival(i, 100.0)
        for p in (size, pref):
            p.touch(i, MIB, 100.0)
    assert pref._sessions.get(0).pace == pytest.approx(size._sessions.get(0).pace)
    assert pref.think.stats(10).quantiles == size.think.stats(10).quantiles


def test_an_arrival_whose_access_never_came_is_not_learnt_later():
    # on a saturated disk each session's turn arrives at 100 but is never accessed (its KV was
    # not needed); it answers at 150, the disk goes idle, and the next turn arrives at 3,500 and
    # is read at once: only that 3,350 s gap is learnt, as by a policy that never heard the first
    stale, clean = _saturated(BidawPrefetchPolicy()), _saturated(BidawPrefetchPolicy())
    _answered(stale, clean)
    for i in range(70):
        stale.observe_arrival(i, 100.0)
    for p in (stale, clean):
        for i in range(70):
            p.observe_answer(i, 10, 150.0)
        assert p.demand.share(3500.0) < 0.01
        for i in range(70):
            p.observe_arrival(i, 3500.0)
            p.touch(i, MIB, 3500.0)
    assert stale.think.stats(10).quantiles == clean.think.stats(10).quantiles
