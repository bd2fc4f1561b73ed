"""The load-or-recompute decision (scheduler.policy.restore_choice) on hand-made cases whose
answer is computed by hand, the issue's OPT-13B example, and monotonicity properties."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim.cost_profile import load_profile
from scheduler.policy import (RECOMPUTE, SPLIT, SPLIT_REVERSED, WAIT_FOR_LOAD, ComputeSide,
                              KVOnSSD, PrefillCost, decide_restore)

# Hand-made hardware: 0.5 ms per recomputed token, 1 ms per loaded token (1,000 B at 1 MB/s).
GPU = PrefillCost(overhead_s=0.0, s_per_token=0.0005)
KV = KVOnSSD(tokens=1000, num_bytes=1_000_000, load_s=1.0, bytes_per_s=1e6)


def ttfts(choice) -> dict[str, float]:
    return {o.name: o.ttft_s for o in choice.options}


def test_tiny_kv_on_a_fast_disk_waits_for_the_load():
    kv = KVOnSSD(20, 2_000_000, 2e6 / 7e9, 7e9)  # 2 MB from a 7 GB/s NVMe: 0.29 ms
    r = decide_restore(kv, ComputeSide(PrefillCost(0.003, 0.0005), new_tokens=10))
    assert r.best.name == WAIT_FOR_LOAD
    assert r.best.ttft_s == pytest.approx(2e6 / 7e9 + 0.003 + 10 * 0.0005)
    assert ttfts(r)[RECOMPUTE] == pytest.approx(0.003 + 30 * 0.0005)


def test_long_history_on_sata_with_an_idle_gpu_recomputes():
    # the example: 1,000 OPT-13B tokens recompute in ~0.16 s, load from SATA in ~0.55 s
    m = load_profile("opt13b-a800")
    cost = PrefillCost(m.iteration_overhead_s, m.forward_flops_per_token / m.prefill_flops_per_s,
                       m.attn_flops_per_token_key / m.prefill_flops_per_s,
                       m.kv_bytes_per_token / m.pcie_bytes_per_s)
    nbytes = 1000 * m.kv_bytes_per_token
    kv = KVOnSSD(1000, nbytes, nbytes / m.ssd_bytes_per_s, m.ssd_bytes_per_s)
    assert kv.load_s == pytest.approx(0.546, abs=0.001)
    r = decide_restore(kv, ComputeSide(cost, new_tokens=1))
    assert r.best.name == RECOMPUTE
    assert 0.14 < r.best.ttft_s < 0.17
    assert ttfts(r)[WAIT_FOR_LOAD] > 0.55
    # both at once, the prefix recomputed while the suffix loads: they meet near
    # k = (0.546 - 0.003) / (0.546 + 0.147) ms ~ 784 tokens
    rev = decide_restore(kv, ComputeSide(cost, new_tokens=1), suffix_loads=True)
    assert rev.best.name == SPLIT_REVERSED and 770 <= rev.best.k <= 795
    assert rev.best.ttft_s < 0.14


def test_gpu_busy_for_part_of_the_load_splits_at_the_prefix_that_lands_meanwhile():
    # W = 0.4 s: load [0, k) for max(k ms, 0.4 s), then (1010 - k) * 0.5 ms: min at k = 400
    r = decide_restore(KV, ComputeSide(GPU, new_tokens=10, slot_free_s=0.4))
    assert (r.best.name, r.best.k) == (SPLIT, 400)
    assert r.best.ttft_s == pytest.approx(0.4 + 610 * 0.0005)
    assert ttfts(r)[WAIT_FOR_LOAD] == pytest.approx(1.005)
    assert ttfts(r)[RECOMPUTE] == pytest.approx(0.905)


def test_reversed_split_meets_in_the_middle_on_an_idle_gpu():
    # max(0.5 ms * k, 1 ms * (1000 - k)) + 10 * 0.5 ms: k = 667 gives max(0.3335, 0.333)
    r = decide_restore(KV, ComputeSide(GPU, new_tokens=10), suffix_loads=True)
    assert (r.best.name, r.best.k) == (SPLIT_REVERSED, 667)
    assert r.best.ttft_s == pytest.approx(0.3335 + 0.005)
    # without suffix reads, the prefix split is linear in k on an idle GPU: an end wins
    plain = decide_restore(KV, ComputeSide(GPU, new_tokens=10))
    assert plain.best.name == RECOMPUTE and SPLIT_REVERSED not in ttfts(plain)


def test_busy_compute_queue_waits_for_the_load():
    r = decide_restore(KV, ComputeSide(GPU, new_tokens=10, slot_free_s=2.0), suffix_loads=True)
    assert r.best.name == WAIT_FOR_LOAD
    assert r.best.ttft_s == pytest.approx(2.005)
    assert min(o.ttft_s for o in r.options if o.name != WAIT_FOR_LOAD) > 2.005


def test_copy_bound_step_recomputes_the_tail_while_the_head_crosses_pcie():
    # WAIT's own step is the PCIe copy, 1000 * 0.1 ms = 0.1 s; SPLIT balances
    # 0.5 ms * (1010 - k) against 0.1 ms * k: k = 842 gives max(0.084, 0.0842)
    gpu = PrefillCost(0.0, 0.0005, copy_s_per_token=0.0001)
    r = decide_restore(KV, ComputeSide(gpu, new_tokens=10, slot_free_s=2.0))
    assert ttfts(r)[WAIT_FOR_LOAD] == pytest.approx(2.1)
    assert (r.best.name, r.best.k) == (SPLIT, 842)
    assert r.best.ttft_s == pytest.approx(2.0842)
    assert r.best.gpu_s < r[WAIT_FOR_LOAD].gpu_s  # it even frees the GPU sooner


def test_tensor6_restore_flops_are_compute_of_the_restored_tokens():
    # 0.2 ms per restored token: WAIT's step is 10 * 0.5 ms + 1000 * 0.2 ms on a GPU busy 2 s
    gpu = PrefillCost(0.0, 0.0005, restore_s_per_token=0.0002)
    r = decide_restore(KV, ComputeSide(gpu, new_tokens=10, slot_free_s=2.0))
    assert r[WAIT_FOR_LOAD].gpu_s == pytest.approx(0.205)
    assert r.best.name == WAIT_FOR_LOAD and r.best.ttft_s == pytest.approx(2.205)
    # SPLIT at k: 0.5 ms * (1010 - k) + 0.2 ms * k, least at k = 999, still above WAIT
    assert (r[SPLIT].k, r[SPLIT].ttft_s) == (999, pytest.approx(2.0 + 0.0055 + 0.1998))


def test_a_turn_ahead_that_becomes_ready_is_never_delayed():
    # a turn ahead is ready at 0.2 s: recomputing over [0, 0.505) would hold it 0.305 s
    compute = ComputeSide(GPU, new_tokens=10, ahead_ready_s=(0.2,))
    r = decide_restore(KV, compute)
    rec = r[RECOMPUTE]
    assert not rec.offered and rec.delay_s == pytest.approx(0.305)
    # SPLIT must start after 0.2 s: k = 201 (k = 200 starts at 0.2 and would cover it)
    assert (r.best.name, r.best.k) == (SPLIT, 201)
    assert r.best.ttft_s == pytest.approx(0.201 + 809 * 0.0005) and r.best.delay_s == 0
    # reversed: the first step [0, 0.5 ms * k) must end by 0.2 s, so k <= 400: 1 - 0.4 + 0.005
    rev = decide_restore(KV, compute, suffix_loads=True)
    assert (rev.best.name, rev.best.k) == (SPLIT_REVERSED, 400)
    assert rev.best.ttft_s == pytest.approx(0.605)
    # with nobody ahead, recompute would have won
    assert decide_restore(KV, ComputeSide(GPU, new_tokens=10)).best.name == RECOMPUTE


def test_a_single_token_history_has_no_split():
    r = decide_restore(KVOnSSD(1, 1000, 0.001, 1e6), ComputeSide(GPU, new_tokens=1))
    split = r[SPLIT]
    assert math.isinf(split.ttft_s) and not split.offered
    assert r.best.name in (WAIT_FOR_LOAD, RECOMPUTE)


def test_the_loads_ahead_delay_a_prefix_load_too():
    # 1 s of other loads ahead: the prefix [0, k) lands at 1 + k ms
    kv = KVOnSSD(1000, 1_000_000, 2.0, 1e6)
    assert kv.ahead_s == pytest.approx(1.0)
    r = decide_restore(kv, ComputeSide(GPU, new_tokens=10, slot_free_s=1.4))
    assert (r.best.name, r.best.k) == (SPLIT, 400)
    assert r.best.ttft_s == pytest.approx(1.4 + 610 * 0.0005)


@pytest.mark.parametrize("make, field", [
    (lambda: KVOnSSD(0, 1, 1.0, 1.0), "KVOnSSD.tokens"),
    (lambda: KVOnSSD(1, 1, 1.0, 0.0), "KVOnSSD.bytes_per_s"),
    (lambda: KVOnSSD(1, 1, -1.0, 1.0), "KVOnSSD.load_s"),
    (lambda: PrefillCost(0.0, float("nan")), "PrefillCost.s_per_token"),
    (lambda: ComputeSide(GPU, -1), "ComputeSide.new_tokens"),
    (lambda: ComputeSide(GPU, 1, -0.5), "ComputeSide.slot_free_s"),
    (lambda: ComputeSide(GPU, 1, 0.0, (1.0, -2.0)), "ComputeSide.ahead_ready_s"),
])
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make()


# ---- properties ---------------------------------------------------------------------------

costs = st.builds(PrefillCost, st.floats(0, 0.01), st.floats(1e-5, 1e-3),
                  st.floats(0, 1e-7), st.floats(0, 1e-4), st.floats(0, 1e-4))
tokens = st.integers(1, 300)
rates = st.floats(1e5, 1e8)


def _kv(n: int, bytes_per_token: int, ahead_bytes: float, rate: float) -> KVOnSSD:
    nbytes = n * bytes_per_token
    return KVOnSSD(n, nbytes, (ahead_bytes + nbytes) / rate, rate)


@settings(max_examples=30, deadline=None)
@given(cost=costs, n=tokens, q=st.integers(0, 50), bpt=st.integers(100, 10_000),
       ahead=st.floats(0, 1e6), rate=rates, faster=st.floats(1, 10), w=st.floats(0, 2),
       reverse=st.booleans())
def test_a_faster_disk_never_makes_waiting_or_the_best_option_worse(cost, n, q, bpt, ahead,
                                                                     rate, faster, w, reverse):
    compute = ComputeSide(cost, q, w)
    slow = decide_restore(_kv(n, bpt, ahead, rate), compute, reverse)
    fast = decide_restore(_kv(n, bpt, ahead, rate * faster), compute, reverse)
    tol = 1e-9
    assert fast[WAIT_FOR_LOAD].ttft_s <= slow[WAIT_FOR_LOAD].ttft_s + tol
    assert fast.best.ttft_s <= slow.best.ttft_s + tol  # nobody ahead: every option is offered


@settings(max_examples=30, deadline=None)
@given(cost=costs, n=tokens, q=st.integers(0, 50), bpt=st.integers(100, 10_000),
       ahead=st.floats(0, 1e6), rate=rates, w=st.floats(0, 2), idle=st.floats(0, 1),
       speedup=st.floats(1, 4), reverse=st.booleans())
def test_more_idle_compute_never_makes_recompute_or_the_best_option_worse(
        cost, n, q, bpt, ahead, rate, w, idle, speedup, reverse):
    kv = _kv(n, bpt, ahead, rate)
    busy = decide_restore(kv, ComputeSide(cost, q, w), reverse)
    freer = decide_restore(kv, ComputeSide(cost, q, w * idle), reverse)
    faster_gpu = PrefillCost(cost.overhead_s, cost.s_per_token / speedup,
                             cost.s_per_token_pair / speedup, cost.copy_s_per_token,
                             cost.restore_s_per_token / speedup)
    quicker = decide_restore(kv, ComputeSide(faster_gpu, q, w), reverse)
    tol = 1e-9
    for better in (freer, quicker):
        assert better[RECOMPUTE].ttft_s <= busy[RECOMPUTE].ttft_s + tol
        assert better.best.ttft_s <= busy.best.ttft_s + tol


def _brute_split(kv: KVOnSSD, c: ComputeSide, allowed: float) -> float:
    """SPLIT's best first-token time, one k at a time in plain Python (an independent check)."""
    best = math.inf
    for k in range(1, kv.tokens):
        start = max(kv.ahead_s + k * kv.s_per_token, c.slot_free_s)
        end = start + float(c.cost.step_s(kv.tokens - k + c.new_tokens, k, k))
        delay = sum(end - r for r in c.ahead_ready_s if start <= r < end)
        if delay <= allowed + 1e-12:
            best = min(best, end)
    return best


@settings(max_examples=30, deadline=None)
@given(cost=costs, n=st.integers(1, 120), q=st.integers(0, 20), bpt=st.integers(100, 10_000),
       ahead=st.floats(0, 1e6), rate=rates, w=st.floats(0, 1),
       ready=st.lists(st.floats(0, 2), max_size=3))
def test_the_choice_is_the_best_option_that_delays_nobody_ahead(cost, n, q, bpt, ahead, rate,
                                                               w, ready):
    kv, compute = _kv(n, bpt, ahead, rate), ComputeSide(cost, q, w, tuple(ready))
    r = decide_restore(kv, compute)
    wait = r[WAIT_FOR_LOAD]
    assert r.best.offered and r.best.delay_s <= wait.delay_s + 1e-12
    assert r.best.ttft_s <= min(o.ttft_s for o in r.options if o.offered)
    split = r[SPLIT]
    expected = _brute_split(kv, compute, wait.delay_s)
    if math.isinf(expected):
        assert not split.offered
    else:
        assert split.offered and split.ttft_s == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_a_piggybacked_reversed_split_meets_the_load_in_the_middle_for_free():
    # β = 1 ms/token, the decode steps compute σ = 3,000 tokens/s for free: the beginning k is
    # done by the time the end lands when k = 3 (1000 − k), k = 750; only the new tokens' step
    # (10 × 0.5 ms) is GPU time of its own
    compute = ComputeSide(GPU, new_tokens=10, running=1, spare_tokens_per_s=3000.0)
    r = decide_restore(KV, compute, suffix_loads=True)
    assert r.best.name == SPLIT_REVERSED and r.best.k == 750
    assert r.best.ttft_s == pytest.approx(0.250 + 0.005)
    assert r.best.gpu_s == pytest.approx(0.005)
    assert ttfts(r)[RECOMPUTE] == pytest.approx(0.505) and ttfts(r)[WAIT_FOR_LOAD] == 1.005
    # 300 tokens of earlier beginnings take the spare compute first: k = 3 (1000 − k) − 300
    taken = ComputeSide(GPU, 10, running=1, spare_tokens_per_s=3000.0, spare_taken_tokens=300)
    best = decide_restore(KV, taken, suffix_loads=True).best
    assert best.k == 675 and best.ttft_s == pytest.approx(0.325 + 0.005)
    # the GPU prefills the turns ahead for W = 0.1 s first, riding only after: k = 3 (0.9 − k/1000) s
    busy = ComputeSide(GPU, 10, slot_free_s=0.1, running=1, spare_tokens_per_s=3000.0)
    best = decide_restore(KV, busy, suffix_loads=True).best
    assert best.k == 675 and best.ttft_s == pytest.approx(0.325 + 0.005)


def test_spare_compute_counts_only_with_turns_decoding_and_suffix_loads():
    plain = decide_restore(KV, ComputeSide(GPU, 10), suffix_loads=True)
    idle = decide_restore(KV, ComputeSide(GPU, 10, spare_tokens_per_s=3000.0), suffix_loads=True)
    assert idle == plain  # nothing decodes: no decode step to ride on
    no_suffix = decide_restore(KV, ComputeSide(GPU, 10, running=1, spare_tokens_per_s=3000.0))
    assert SPLIT_REVERSED not in {o.name for o in no_suffix.options}
