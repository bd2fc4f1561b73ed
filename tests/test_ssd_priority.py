"""The timed simulator's SSD: a demand load (urgent) pauses a speculative promotion
(background); write-backs (neither) always share; a promotion a turn now waits for is expedited.
Hand-made transfers at 100 B/s whose answers are worked out by hand."""
from __future__ import annotations

import pytest

from bench.sim.ssd import SharedBandwidth


def test_a_demand_load_pauses_a_promotion_and_it_resumes_after():
    ssd = SharedBandwidth(100.0)
    ssd.start("p", 100.0, 0.0, background=True)
    ssd.start("d", 50.0, 0.5, urgent=True)     # p has 50 left; d alone at 100 B/s
    assert ssd.next_completion() == pytest.approx(1.0)
    assert ssd.finish_estimates(0.5) == {"d": pytest.approx(0.5), "p": pytest.approx(1.0)}
    assert ssd.finish_due(1.0) == ["d"]
    assert ssd.next_completion() == pytest.approx(1.5)  # p: its 50 bytes, alone again
    assert ssd.finish_due(1.5) == ["p"] and len(ssd) == 0


def test_a_load_estimate_ignores_the_paused_promotion_but_not_the_writes():
    ssd = SharedBandwidth(100.0)
    ssd.start("p", 1000.0, 0.0, background=True)
    ssd.start("w", 20.0, 0.0)
    # a 30-byte load shares with the write (20 of its bytes) only: (20 + 30) / 100
    assert ssd.load_estimate(30.0, 0.0) == pytest.approx(0.5)
    # without the priority (both plain) it would also wait 30 bytes of p's
    plain = SharedBandwidth(100.0)
    plain.start("p", 1000.0, 0.0)
    plain.start("w", 20.0, 0.0)
    assert plain.load_estimate(30.0, 0.0) == pytest.approx(0.8)


def test_writes_share_with_a_demand_load_while_the_promotion_waits():
    ssd = SharedBandwidth(100.0)
    ssd.start("p", 100.0, 0.0, background=True)
    ssd.start("d", 100.0, 0.0, urgent=True)
    ssd.start("w", 50.0, 0.0)
    # d and w share (50 B/s each): w done at 1.0, d alone to 1.5, then p from 1.5 to 2.5
    assert ssd.finish_estimates(0.0) == {"w": pytest.approx(1.0), "d": pytest.approx(1.5),
                                         "p": pytest.approx(2.5)}


def test_an_expedited_promotion_shares_with_the_demand_load():
    ssd = SharedBandwidth(100.0)
    ssd.start("p", 100.0, 0.0, background=True)
    ssd.start("d", 100.0, 0.0, urgent=True)
    ssd.expedite("p", 0.5)  # d moved 50 alone; now both share: d done at 1.5, p (100 left) 2.0
    assert ssd.finish_estimates(0.5) == {"d": pytest.approx(1.0), "p": pytest.approx(1.5)}


def test_without_background_transfers_it_is_plain_equal_sharing():
    a, b = SharedBandwidth(100.0), SharedBandwidth(100.0)
    a.start("x", 100.0, 0.0, urgent=True)
    a.start("y", 50.0, 0.2)
    b.start("x", 100.0, 0.0)
    b.start("y", 50.0, 0.2)
    assert a.finish_estimates(0.3) == pytest.approx(b.finish_estimates(0.3))
    assert a.next_completion() == pytest.approx(b.next_completion())
