"""What the live store adds to bidaw-prefetch's model (pure): a turn's arrival ends the user's
think time, so the gap is learnt then, not at the read of its KV a queue wait later."""
from __future__ import annotations

import pytest

from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy

MIB = 1 << 20


def _learn(arrive: float | None, read: float) -> BidawPrefetchPolicy:
    """70 sessions answer 10 tokens at t=0; each turn arrives at `arrive` (None: unheard) and
    its KV is read at `read`; returns the policy."""
    p = BidawPrefetchPolicy()
    for i in range(70):
        p.admit(i, MIB, 0.0)
        p.observe_answer(i, 10, 0.0)
        if arrive is not None:
            p.observe_arrival(i, arrive)
        p.touch(i, MIB, read)
    return p


def test_the_think_time_is_learnt_at_arrival_not_at_the_read():
    heard = _learn(arrive=30.0, read=200.0).think.stats(10).quantiles[0.5]
    at_read = _learn(arrive=None, read=200.0).think.stats(10).quantiles[0.5]
    same_time = _learn(arrive=None, read=30.0).think.stats(10).quantiles[0.5]
    assert heard == pytest.approx(same_time) and heard < 40 < 150 < at_read


def test_an_arrival_without_an_answer_before_it_teaches_nothing():
    p = BidawPrefetchPolicy()
    p.admit("a", MIB, 0.0)
    before = p.think.stats(None).quantiles
    p.observe_arrival("a", 5.0)   # no answer yet: no gap to learn
    p.observe_arrival("new", 5.0)  # unknown session
    assert p.think.stats(None).quantiles == before and p.return_window("new") is None
    p.observe_answer("a", 10, 6.0)
    p.observe_arrival("a", 40.0)
    expected, latest = p.return_window("a")  # from the arrival on, until the next answer
    assert 40.0 < expected < latest
