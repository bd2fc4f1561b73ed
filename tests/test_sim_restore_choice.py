"""bidaw-restore in the timed simulator: the per-turn load-or-recompute choice
(scheduler.policy.restore_choice) wired into the engine, on hand-made workloads whose answer is
known: a very slow disk makes it recompute, a very fast one makes it wait, a busy GPU makes it
load a prefix; every turn completes, and a lone turn's first token comes when the decision said."""
from __future__ import annotations

import pytest

from bench.sim.cost_profile import load_profile
from bench.sim.engine import simulate_system
from bench.sim.timed import simulate
from bench.sim.workload import build_workload
from bench.traces import Turn

USERS = 5
HISTORY = 1500  # prompt tokens of each first turn: 0.6 GB of tensor 6, more than DRAM holds


def _cost(ssd_gbps: float):
    # DRAM smaller than one KV: every returning turn finds its KV on SSD.
    return load_profile("opt13b-a800", {"host.dram_gib": 0.5, "host.watermark_gib": 0,
                                        "host.ssd_read_gbps": ssd_gbps})


def _returns(gap_s: float) -> list[Turn]:
    """USERS long first turns, then each user returns with 10 tokens, `gap_s` apart."""
    turns = [Turn(u, 10.0 * u, HISTORY, 10, 0) for u in range(USERS)]
    turns += [Turn(u, 100.0 + gap_s * u, 10, 10, 1) for u in range(USERS)]
    return sorted(turns, key=lambda t: t.time)


def _run(turns, ssd_gbps: float) -> dict:
    return simulate(turns, ["bidaw", "bidaw-restore", "bidaw-restore-stall"], _cost(ssd_gbps),
                    window=(50, 1000))


def test_a_very_slow_disk_makes_it_recompute():
    res = _run(_returns(gap_s=5.0), ssd_gbps=0.05)  # a 12 s load against a 0.2 s prefill
    mine, bidaw = res["bidaw-restore"], res["bidaw"]
    assert mine["restore_choices"] == {"wait": 0, "recompute": USERS, "split": 0}
    assert mine["turns"] == bidaw["turns"] == USERS
    assert mine["ssd_bytes_read"] == 0 < bidaw["ssd_bytes_read"]
    assert mine["ttft_mean"] < 0.1 * bidaw["ttft_mean"]


def test_a_very_fast_disk_makes_it_wait_exactly_as_bidaw():
    res = _run(_returns(gap_s=0.1), ssd_gbps=1000.0)
    mine, bidaw = res["bidaw-restore"], res["bidaw"]
    assert mine["restore_choices"] == {"wait": USERS, "recompute": 0, "split": 0}
    assert mine["turns"] == USERS
    for key in ("ttft_mean", "latency_mean", "ssd_bytes_read", "hits", "misses"):
        assert mine[key] == bidaw[key], key
    assert "restore_choices" not in bidaw  # only the choosing system reports it


def test_a_busy_gpu_makes_it_load_a_prefix_while_the_turns_ahead_run():
    # All return at once: while the GPU serves the first ones, the next ones' prefixes load.
    res = _run(_returns(gap_s=0.1), ssd_gbps=1.5)
    mine, bidaw = res["bidaw-restore"], res["bidaw"]
    assert mine["restore_choices"]["split"] >= 2
    assert sum(mine["restore_choices"].values()) == USERS == mine["turns"]
    assert 0 < mine["ssd_bytes_read"] < bidaw["ssd_bytes_read"]  # prefixes only
    assert mine["ttft_mean"] < bidaw["ttft_mean"]


@pytest.mark.parametrize("ssd_gbps", [0.05, 1000.0])
def test_a_lone_turn_gets_its_first_token_when_the_chosen_option_said(ssd_gbps):
    from bench.sim.engine import TimedSimulation
    from bench.sim.systems import system_spec
    from scheduler.policy import ComputeSide, KVOnSSD, decide_restore

    cost = _cost(ssd_gbps)
    turns = [Turn(1, 0.0, HISTORY, 10, 0), Turn(1, 100.0, 10, 10, 1)]
    workload = build_workload(turns, window=(50, 1000))
    log = TimedSimulation(workload, cost, system_spec("bidaw-restore")).run()
    stored = (HISTORY + 10) * cost.stored_bytes_per_token("tensor6")
    kv = KVOnSSD(HISTORY + 10, stored, stored / cost.ssd_bytes_per_s, cost.ssd_bytes_per_s)
    best = decide_restore(kv, ComputeSide(cost.prefill_cost("tensor6"), new_tokens=10)).best
    assert best.name == ("recompute" if ssd_gbps < 1 else "wait_for_load")
    assert log.first_token[0] - log.arrival[0] == pytest.approx(best.ttft_s, rel=1e-6)


def test_prefill_cost_is_the_engines_prefill_step():
    cost = load_profile("opt13b-a800")
    for tensor in ("kv", "tensor6"):
        step = cost.prefill_cost(tensor)
        restore = cost.restore_flops_per_token(tensor)
        for new, ctx in ((10, 1500), (1510, 0), (700, 800)):
            flops = cost.prefill_flops(new, ctx) + ctx * restore
            want = cost.prefill_step_time(flops, ctx * cost.stored_bytes_per_token(tensor))
            assert float(step.step_s(new, ctx, ctx)) == pytest.approx(want, rel=1e-12)


def test_restore_systems_keep_every_turn_on_a_busy_synthetic_trace():
    from bench.traces import SynthConfig, synthesize

    turns = synthesize(SynthConfig(users=120, users_per_min=30, seed=3))
    cost = load_profile("opt13b-a800", {"host.dram_gib": 12, "host.watermark_gib": 0.5})
    workload = build_workload(turns, window=(600, 3000), time_scale=2.0)
    logs = {name: simulate_system(workload, cost, name)
            for name in ("bidaw", "bidaw-restore", "bidaw-restore-stall")}
    assert {len(log.arrival) for log in logs.values()} == {workload.measured_count}
    choices = logs["bidaw-restore"].restore_choices
    assert sum(choices.values()) > 0 and logs["bidaw-restore"].misses > 0


def test_a_heavy_decode_stall_weight_keeps_the_running_batch_from_waiting_on_recomputes():
    from dataclasses import replace

    from bench.sim.engine import TimedSimulation
    from bench.sim.systems import system_spec

    # a new user decoding a long answer throughout the returns: the batch a recompute stalls
    turns = sorted(_returns(gap_s=0.1) + [Turn(99, 99.0, 10, 1500, 0)], key=lambda t: t.time)
    workload = build_workload(turns, window=(50, 1000))
    spec = system_spec("bidaw-restore")
    plain = TimedSimulation(workload, _cost(1.5), spec).run()
    heavy = TimedSimulation(workload, _cost(1.5), replace(spec, stall_weight=1e6)).run()
    full = TimedSimulation(workload, _cost(1.5), system_spec("bidaw")).run().ssd_bytes
    # the decision's own choice recomputes most of the history; the least-GPU choice loads it
    assert plain.ssd_bytes < 0.5 * full
    assert heavy.restore_choices["recompute"] <= 1 and heavy.ssd_bytes > 0.9 * full
    assert len(heavy.arrival) == USERS + 1
