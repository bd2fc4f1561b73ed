"""The reversed split in the timed simulator (`suffix_loads`, bidaw-prefetch): the history's
beginning is recomputed on the GPU while its end loads, on hand-made workloads whose answer is
known from the pure decision (scheduler.policy.restore_choice)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from bench.sim.cost_profile import load_profile
from bench.sim.engine import TimedSimulation
from bench.sim.systems import system_spec
from bench.sim.workload import build_workload
from bench.traces import Turn
from scheduler.policy import SPLIT_REVERSED, ComputeSide, KVOnSSD, decide_restore

HISTORY = 1500


def _cost(ssd_gbps: float = 1.5):
    # DRAM smaller than one KV: every returning turn finds its KV on SSD
    return load_profile("opt13b-a800", {"host.dram_gib": 0.5, "host.watermark_gib": 0,
                                        "host.ssd_read_gbps": ssd_gbps})


def _spec(suffix: bool):
    return replace(system_spec("bidaw-restore"), suffix_loads=suffix)


def _lone() -> list[Turn]:
    return [Turn(1, 0.0, HISTORY, 10, 0), Turn(1, 100.0, 10, 10, 1)]


def test_a_lone_turn_recomputes_the_beginning_while_the_end_loads_as_the_decision_said():
    cost = _cost()
    log = TimedSimulation(build_workload(_lone(), window=(50, 1000)), cost, _spec(True)).run()
    n = HISTORY + 10
    stored = n * cost.stored_bytes_per_token("tensor6")
    kv = KVOnSSD(n, stored, stored / cost.ssd_bytes_per_s, cost.ssd_bytes_per_s)
    best = decide_restore(kv, ComputeSide(cost.prefill_cost("tensor6"), new_tokens=10),
                          suffix_loads=True).best
    assert best.name == SPLIT_REVERSED and 0 < best.k < n  # 1.5 GB/s: both at once win
    assert log.restore_choices == {"wait": 0, "recompute": 0, "split": 0, "reversed": 1}
    assert log.first_token[0] - log.arrival[0] == pytest.approx(best.ttft_s, rel=1e-6)
    assert log.ssd_bytes == stored * (n - best.k) // n  # the end's share only


def test_the_reversed_split_beats_both_ends_on_a_lone_turn():
    cost = _cost()
    workload = build_workload(_lone(), window=(50, 1000))
    both = TimedSimulation(workload, cost, _spec(True)).run()
    prefix = TimedSimulation(workload, cost, _spec(False)).run()
    assert "reversed" not in prefix.restore_choices  # not offered without suffix reads
    ttft = lambda log: log.first_token[0] - log.arrival[0]
    assert ttft(both) < 0.8 * ttft(prefix)


def test_without_suffix_loads_nothing_changes_to_the_digit():
    from bench.traces import SynthConfig, synthesize

    turns = synthesize(SynthConfig(users=60, users_per_min=30, seed=5))
    workload = build_workload(turns, window=(600, 2000), time_scale=2.0)
    cost = load_profile("opt13b-a800", {"host.dram_gib": 12, "host.watermark_gib": 0.5})
    old = TimedSimulation(workload, cost, system_spec("bidaw-prefetch-prefix-only")).run()
    spec = replace(system_spec("bidaw-prefetch"), suffix_loads=False, name="x")
    same = TimedSimulation(workload, cost, spec).run()
    assert old.summary() == same.summary()


def test_every_turn_completes_with_reversed_splits_on_a_busy_synthetic_trace():
    from bench.traces import SynthConfig, synthesize

    turns = synthesize(SynthConfig(users=120, users_per_min=30, seed=3))
    workload = build_workload(turns, window=(600, 3000), time_scale=2.0)
    cost = load_profile("opt13b-a800", {"host.dram_gib": 12, "host.watermark_gib": 0.5})
    sim = TimedSimulation(workload, cost, system_spec("bidaw-prefetch"))
    log = sim.run()
    assert len(log.arrival) == workload.measured_count
    assert log.restore_choices["reversed"] > 0
    assert not sim.beginnings.due or all(j.piece == 1 for j in sim.beginnings.due)


def test_a_decode_step_computes_its_free_prefill_tokens_without_lasting_longer():
    cost = load_profile("opt13b-a800")
    for batch, ctx, done in ((1, 100, 0), (13, 19_500, 0), (40, 60_000, 700)):
        c = cost.free_prefill_tokens(batch, ctx, done)
        assert c > 0
        plain = cost.decode_step_time(batch, ctx)
        assert cost.decode_step_time(batch, ctx, cost.prefill_flops(c, done)) == plain
        assert cost.decode_step_time(batch, ctx, cost.prefill_flops(c + 1, done)) > plain
    assert cost.free_prefill_tokens(cost.max_batch * 200, 0) == 0  # a compute-bound step


def test_a_beginning_riding_on_the_decode_steps_spares_the_running_turn():
    # a new user decodes a long answer while another returns with its KV on SSD
    turns = sorted(_lone() + [Turn(2, 99.0, 10, 1500, 0)], key=lambda t: t.time)
    workload = build_workload(turns, window=(50, 1000))
    spec = replace(_spec(True), piggyback=True)
    ride = TimedSimulation(workload, _cost(), spec).run()
    own = TimedSimulation(workload, _cost(), _spec(True)).run()
    prefix = TimedSimulation(workload, _cost(), _spec(False)).run()
    assert ride.restore_choices["reversed"] == 1 and len(ride.arrival) == 2

    def of(log):  # (the return's TTFT, the long answer's latency)
        lat = [d - a for d, a in zip(log.done, log.arrival)]
        ret = lat.index(min(lat))
        return log.first_token[ret] - log.arrival[ret], max(lat)

    (ride_ttft, ride_lat), (own_ttft, own_lat), (pre_ttft, pre_lat) = of(ride), of(own), of(prefix)
    # riding costs the return some TTFT against a step of its own (the whole GPU), still less
    # than loading a prefix, and spares the decoding turn the beginning's step
    assert own_ttft < ride_ttft < pre_ttft
    assert ride_lat < own_lat - 0.1 and ride_lat < pre_lat
    assert ride_ttft + ride_lat < own_ttft + own_lat
