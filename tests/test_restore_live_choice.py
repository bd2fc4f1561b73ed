"""The live scheduler's load-or-recompute choice: the prefill cost it learns from turn summaries
(scheduler.policy.prefill_rate) and the choice it makes from a store's SessionLocation
(scheduler.restore_chooser), on hand-made cases whose answer is worked out by hand. Most cases
offer prefixes only (`suffix_loads=False`, the choice before the store read suffixes); the
reversed split has its own."""
from __future__ import annotations

import pytest

from scheduler.policy.prefill_rate import PrefillRate
from scheduler.policy.slot_wait import SlotWait
from scheduler.restore_chooser import LiveRestoreChooser, RestorePlan, prompt_tokens
from services.runtime.gen import common_pb2, kv_store_pb2


def _summary(prompt, cached, prefill_s, queue_s=0.2, load_s=0.1):
    return common_pb2.TurnSummary(prompt_tokens=prompt, cached_tokens=cached,
                                  ttft_s=queue_s + load_s + prefill_s, queue_s=queue_s,
                                  kv_load_s=load_s)


def _trained(stall_weight=0.0, suffix_loads=False) -> LiveRestoreChooser:
    """A chooser that has seen turns costing 10 ms + 0.5 ms per computed token."""
    chooser = LiveRestoreChooser(stall_weight, suffix_loads=suffix_loads)
    for computed in (10, 200, 50, 800, 400, 30, 1000, 120):
        chooser.observe(_summary(computed + 500, 500, 0.010 + 0.0005 * computed))
    return chooser


def _on_ssd(tokens=1000, load_s=1.0, tier=common_pb2.TIER_SSD):
    return kv_store_pb2.SessionLocation(session_id="s", tier=tier, num_bytes=tokens * 1000,
                                        num_tokens=tokens, load_estimate_s=load_s)


def test_the_prefill_cost_is_fitted_from_summaries():
    cost = _trained().rate.cost()
    assert cost.overhead_s == pytest.approx(0.010, rel=1e-6)
    assert cost.s_per_token == pytest.approx(0.0005, rel=1e-6)


def test_until_enough_turns_are_seen_every_turn_waits_for_its_load():
    chooser = LiveRestoreChooser()
    for _ in range(7):
        chooser.observe(_summary(600, 500, 0.06))
    assert chooser.rate.cost() is None
    assert chooser.choose(_on_ssd(load_s=100.0), 1010, 0, (), 0) is None


def test_equal_sizes_give_a_rate_without_overhead_and_idle_turns_say_nothing():
    rate = PrefillRate(min_turns=2)
    for _ in range(3):
        rate.observe(100, 0.05)
    rate.observe(0, 0.01)  # all restored: no prefill rate in it
    cost = rate.cost()
    assert (cost.overhead_s, cost.s_per_token) == (0.0, pytest.approx(0.0005))


def test_a_slow_load_on_an_idle_gpu_recomputes():
    # recompute 1,010 tokens: 0.515 s; wait: 1 s + one step; split k: k ms + (1010 - k) 0.5 ms
    assert _trained().choose(_on_ssd(load_s=1.0), 1010, 0, (), 0) == RestorePlan(0)


def test_a_fast_load_is_waited_for():
    assert _trained().choose(_on_ssd(load_s=0.05), 1010, 0, (), 0) is None


def test_turns_ready_ahead_make_it_load_the_prefix_that_lands_meanwhile():
    # 40 ready turns ahead, one 10-token step each: W = 40 * 0.015 = 0.6 s; a prefix of 600
    # tokens lands by then (1 ms each) and the other 400 + 10 are recomputed
    assert _trained().choose(_on_ssd(load_s=1.0), 1010, 40, (), 0) == RestorePlan(600)


def test_a_weighed_stall_of_a_large_batch_makes_it_wait_instead_of_recomputing():
    chooser = _trained(stall_weight=0.3)
    assert chooser.choose(_on_ssd(load_s=1.0), 1010, 0, (), 0) == RestorePlan(0)  # alone
    assert chooser.choose(_on_ssd(load_s=1.0), 1010, 0, (), 20) is None
    assert chooser.counts == {"wait_for_load": 1, "recompute": 1, "split": 0,
                              "split_reversed": 0}


def test_kv_not_on_ssd_or_without_an_estimate_is_left_alone():
    chooser = _trained()
    assert chooser.choose(_on_ssd(tier=common_pb2.TIER_DRAM), 1010, 0, (), 0) is None
    assert chooser.choose(_on_ssd(load_s=0.0), 1010, 0, (), 0) is None
    assert chooser.choose(None, 1010, 0, (), 0) is None


def test_prompt_size_counts_token_ids_or_characters():
    assert prompt_tokens(common_pb2.TurnRequest(prompt_token_ids=[1, 2, 3])) == 3
    msgs = [common_pb2.ChatMessage(role="user", content="x" * 40)]
    assert prompt_tokens(common_pb2.TurnRequest(messages=msgs)) == 10


def test_a_bad_stall_weight_names_the_flag():
    with pytest.raises(ValueError, match="--restore-stall-weight"):
        LiveRestoreChooser(stall_weight=-1.0)


def test_at_arrival_the_loads_waiting_ahead_can_make_it_recompute_at_once():
    chooser = _trained()
    # alone: wait 0.3 + 0.015 s beats recompute 0.515 s; behind 0.5 s of waiting loads it does not
    assert not chooser.recompute_at_arrival(_on_ssd(load_s=0.3), 1010, 0, 0.0, 0)
    assert chooser.recompute_at_arrival(_on_ssd(load_s=0.3), 1010, 0, 0.5, 0)
    assert chooser.counts["recompute"] == 1 and chooser.counts["wait_for_load"] == 0


def test_with_suffix_reads_a_slow_load_on_an_idle_gpu_recomputes_the_beginning_meanwhile():
    # recompute [0, k): 10 ms + 0.5 ms·k from now; read [k, 1000): 1 ms per token. They meet
    # at k = 660 (0.34 s both), then one 10-token step (15 ms): 0.355 s against the whole
    # recompute's 0.515 s and the wait's 1.015 s
    chooser = _trained(suffix_loads=True)
    assert chooser.choose(_on_ssd(load_s=1.0), 1010, 0, (), 0) == RestorePlan(suffix_from=660)
    assert chooser.counts["split_reversed"] == 1
    # a fast load (0.05 ms per token) still gains a little: k = 72 meets at 0.0464 s (the
    # wait: 0.05 s); a turn that arrives is never split at arrival (only recomputed)
    assert chooser.choose(_on_ssd(load_s=0.05), 1010, 0, (), 0) == RestorePlan(suffix_from=72)
    assert not chooser.recompute_at_arrival(_on_ssd(load_s=1.0), 1010, 0, 0.0, 0)


def test_a_reversed_split_turn_teaches_the_prefill_rate_nothing():
    chooser = _trained()
    before = chooser.rate.cost()
    summary = _summary(1010, 340, 5.0)
    summary.recomputed_tokens = 660
    chooser.observe(summary)
    assert chooser.rate.cost() == before


def test_the_slot_wait_is_learnt_from_how_long_turns_hold_their_slots():
    wait = SlotWait(min_turns=4)
    for service in (10.0, 14.0, 12.0):
        wait.observe(service)
    assert wait.wait_s(5, 0, 6) == 0.0  # not enough turns seen yet
    wait.observe(12.0)
    wait.observe(-1.0)  # says nothing
    assert wait.service_s == pytest.approx(12.0, rel=0.05)
    assert wait.wait_s(5, 0, 6) == pytest.approx(6 * wait.service_s / 6)  # 6 slot frees
    assert wait.wait_s(2, 3, 6) == 0.0  # a slot is free for it


def test_a_slow_load_is_waited_for_when_the_workers_slots_are_all_taken():
    # Idle, the 1 s load loses to a 0.515 s recompute (above). With 6 slots busy, 3 turns ready
    # ahead and turns holding a slot 12 s, the turn waits ~8 s for a slot: the load is free.
    chooser = _trained()
    for _ in range(8):
        chooser.observe(common_pb2.TurnSummary(latency_s=12.5, queue_s=0.5))
    assert chooser.choose(_on_ssd(load_s=1.0), 1010, 3, (), 6, slots=(0, 6)) is None
    assert chooser.choose(_on_ssd(load_s=1.0), 1010, 0, (), 5, slots=(1, 6)) == RestorePlan(0)
    assert not chooser.recompute_at_arrival(_on_ssd(load_s=1.0), 1010, 3, 0.0, 6, (0, 6))


def _landed(head=500, tokens=1000, rest_s=0.5):
    """A prepared load read end first: tokens [head, tokens) landed, the rest `rest_s` away."""
    loc = _on_ssd(tokens, rest_s, common_pb2.TIER_LOADING)
    loc.landed_from_token = head
    return loc


def test_a_turn_arriving_mid_load_reads_the_landed_end_and_recomputes_the_beginning():
    chooser = _trained(suffix_loads=True)
    # the 500 tokens not landed: read at 1 ms each, or recompute [0, k) at 10 ms + 0.5 ms·k
    # meanwhile; they meet at k = 327 (0.173 s), well before the 0.5 s the rest takes
    plan = chooser.at_arrival(_landed(), 1010, 0, 0, 0)
    assert plan is not None and plan.max_tokens is None and 320 <= plan.suffix_from <= 330
    # a read of the rest so slow that all of it is recomputed: the turn reads from the landed
    # start (the load then stops)
    assert chooser.at_arrival(_landed(rest_s=100.0), 1010, 0, 0, 0).suffix_from >= 499
    # the landed end counts as history, not as the turn's new tokens: a bigger landed end
    # with the same rest leaves less to recompute, so the meeting point moves down
    assert chooser.hand_over(_landed(head=300, rest_s=0.3), 1010, 0, 0).suffix_from < 200


def test_a_turn_arriving_mid_load_waits_for_the_rest_when_the_gpu_is_busy_anyway():
    chooser = _trained(suffix_loads=True)
    for _ in range(8):
        chooser.observe(common_pb2.TurnSummary(latency_s=12.5, queue_s=0.5))
    assert chooser.at_arrival(_landed(), 1010, 3, 0, 6, (0, 6)) is None
    assert chooser.hand_over(_landed(head=0), 1010, 0, 0) is None  # nothing landed yet
