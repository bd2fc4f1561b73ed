"""The load-or-recompute decision with the decode stall weighed in (decide_restore's
`stall_weight`, the choice bidaw-restore-stall and the live scheduler make), on hand-made cases
whose answer is worked out by hand."""
from __future__ import annotations

import pytest

from scheduler.policy import (RECOMPUTE, SPLIT, WAIT_FOR_LOAD, ComputeSide, KVOnSSD, PrefillCost,
                              decide_restore)

# 0.5 ms per computed token, no step overhead; 1,000 tokens at 1 ms each from the disk.
GPU = PrefillCost(overhead_s=0.0, s_per_token=0.0005)
KV = KVOnSSD(tokens=1000, num_bytes=1_000_000, load_s=1.0, bytes_per_s=1e6)


def test_an_idle_batch_recomputes_and_the_weight_changes_nothing():
    # recompute 1,010 tokens: 0.505 s; a split at k costs k ms + (1010 - k) * 0.5 ms > 0.505
    alone = decide_restore(KV, ComputeSide(GPU, new_tokens=10))
    weighted = decide_restore(KV, ComputeSide(GPU, new_tokens=10), stall_weight=0.1)
    assert alone.best.name == weighted.best.name == RECOMPUTE
    assert weighted.best.ttft_s == pytest.approx(0.505)


def test_a_large_running_batch_makes_it_wait_for_the_load():
    # λ · running = 2: wait 1.005 + 2 · 0.005 = 1.015 s; recompute 0.505 + 2 · 0.505 = 1.515;
    # the best split (k = 999) 0.999 + 0.0055 + 2 · 0.0055 = 1.0155: waiting wins
    r = decide_restore(KV, ComputeSide(GPU, new_tokens=10, running=20), stall_weight=0.1)
    assert r.best.name == WAIT_FOR_LOAD
    assert r.best.ttft_s == pytest.approx(1.005)
    assert r[SPLIT].k == 999  # the split's own k weighs the stall too
    assert decide_restore(KV, ComputeSide(GPU, new_tokens=10, running=20)).best.name == RECOMPUTE


def test_a_small_stall_still_splits_where_load_and_compute_meet():
    # GPU busy 0.4 s: load [0, k) meanwhile; for k ≤ 400 the step starts at 0.4, beyond it at
    # k ms. λ · running = 0.5: cost(k) = start + 0.0005 (1010 - k) · 1.5, least at k = 400
    r = decide_restore(KV, ComputeSide(GPU, new_tokens=10, slot_free_s=0.4, running=5),
                       stall_weight=0.1)
    assert (r.best.name, r.best.k) == (SPLIT, 400)
    assert r.best.ttft_s == pytest.approx(0.4 + 610 * 0.0005)
    # past λ · running = 1 each loaded token costs less than the stall it saves: k -> n - 1
    heavy = decide_restore(KV, ComputeSide(GPU, new_tokens=10, slot_free_s=0.4, running=30),
                           stall_weight=0.1)
    assert heavy.best.name == WAIT_FOR_LOAD or heavy.best.k == 999


def test_the_stall_never_buys_a_delay_of_the_turns_ahead():
    # a turn ahead lands at 0.2 s; recomputing from 0 would hold the GPU over it (delay 0.305 s),
    # as would any split whose step starts before 0.2 s. WAIT starts at 1.0: delays nobody.
    # With no running batch the offered options are split (k > 200) or wait.
    side = ComputeSide(GPU, new_tokens=10, ahead_ready_s=(0.2,), running=0)
    r = decide_restore(KV, side, stall_weight=0.1)
    assert not r[RECOMPUTE].offered and r.best.name == SPLIT and r.best.k == 201
    assert r.best.delay_s == 0.0
    # a huge weight on the stall must still pick only among the options that delay nobody
    many = decide_restore(KV, ComputeSide(GPU, new_tokens=10, ahead_ready_s=(0.2,), running=1000),
                          stall_weight=1.0)
    assert many.best.offered and many.best.delay_s == 0.0


@pytest.mark.parametrize("weight", [-0.1, float("nan")])
def test_a_bad_weight_names_itself(weight):
    with pytest.raises(ValueError, match="stall_weight"):
        decide_restore(KV, ComputeSide(GPU, new_tokens=10), stall_weight=weight)


def test_a_negative_running_batch_names_the_field():
    with pytest.raises(ValueError, match="running"):
        ComputeSide(GPU, new_tokens=10, running=-1)


def _behind(d: int) -> KVOnSSD:
    return KVOnSSD(tokens=1000, num_bytes=1_000_000, load_s=1.0, bytes_per_s=1e6, loads_behind=d)


def test_loads_waiting_behind_on_the_disk_make_a_busy_batch_recompute():
    # λ · running = 2 as above: wait 1.015, recompute 1.515. Six loads behind, each delayed by
    # the 1 s read: wait 1.015 + 0.1 · 6 · 1.0 = 1.615; a split at k costs 1.515 + 0.0001 k
    side = ComputeSide(GPU, new_tokens=10, running=20)
    assert decide_restore(_behind(0), side, stall_weight=0.1).best.name == WAIT_FOR_LOAD
    r = decide_restore(_behind(6), side, stall_weight=0.1)
    assert r.best.name == RECOMPUTE and r.best.ttft_s == pytest.approx(0.505)
    assert r[WAIT_FOR_LOAD].ttft_s == pytest.approx(1.005)  # the turn's own times are unchanged


def test_more_loads_behind_never_read_more_and_no_weight_ignores_them():
    side = ComputeSide(GPU, new_tokens=10, slot_free_s=0.4, running=8)
    read = [decide_restore(_behind(d), side, stall_weight=0.1).best.k for d in range(12)]
    assert read == sorted(read, reverse=True) and read[0] > 0 and read[-1] == 0
    assert decide_restore(_behind(9), side) == decide_restore(_behind(0), side)


def test_a_negative_count_of_loads_behind_names_the_field():
    with pytest.raises(ValueError, match="loads_behind"):
        _behind(-1)
