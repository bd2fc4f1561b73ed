"""The timed simulator: invariants on a small run, a case built to show I/O-aware scheduling, the
closed-loop arrival rule, the SSD's shared bandwidth, profiles and the command contract."""
from __future__ import annotations

import json

import pytest

from bench.sim.cost_profile import load_profile
from bench.sim.ssd import SharedBandwidth
from bench.sim.systems import DEFAULT_SYSTEMS, system_spec
from bench.sim.workload import build_workload
from bench.sim.engine import simulate_system
from bench.sim.timed import simulate
from bench.traces import SynthConfig, Turn, synthesize

CONTRACT_KEYS = {"ttft_mean", "ttft_p99", "latency_mean", "latency_p50", "latency_p90",
                 "latency_p95", "latency_p99", "queueing_mean", "hit_rate",
                 "throughput_turns_per_s"}


@pytest.fixture(scope="module")
def small_trace() -> list[Turn]:
    return synthesize(SynthConfig(users=150, users_per_min=30, seed=1))


@pytest.fixture(scope="module")
def small_run(small_trace):
    # A DRAM tier small enough that the tiered systems miss, and a busy enough replay.
    cost = load_profile("opt13b-a800", {"host.dram_gib": 12, "host.watermark_gib": 0.5})
    return simulate(small_trace, DEFAULT_SYSTEMS + ("bidaw-no-io",), cost, window=(600, 4000),
                    time_scale=2.0)


def test_every_system_measures_the_same_turns_with_sane_metrics(small_run):
    counts = {m["turns"] for m in small_run.values()}
    assert len(counts) == 1 and counts.pop() > 500
    for name, m in small_run.items():
        assert CONTRACT_KEYS <= set(m), name
        assert 0.0 <= m["hit_rate"] <= 1.0
        assert 0.0 <= m["queueing_mean"] <= m["ttft_mean"] <= m["latency_mean"]
        assert m["latency_p50"] <= m["latency_p90"] <= m["latency_p95"] <= m["latency_p99"]


def test_ideal_is_a_lower_bound_and_hit_rates_are_consistent(small_run):
    ideal = small_run["ideal"]
    assert ideal["hit_rate"] == 1.0 and ideal["ssd_bytes_read"] == 0
    for name, m in small_run.items():
        assert ideal["latency_mean"] <= m["latency_mean"] * (1 + 1e-9), name
        assert ideal["ttft_mean"] <= m["ttft_mean"] * (1 + 1e-9), name
    rec = small_run["recompute"]
    assert rec["hits"] == 0 and rec["hit_rate"] == 0.0 and rec["ssd_bytes_read"] == 0
    tiered = [n for n in small_run if n not in ("ideal", "recompute")]
    assert any(small_run[n]["misses"] > 0 for n in tiered)  # the small DRAM tier did bite
    for n in tiered:  # a miss of stored KV is read from SSD; without misses nothing is read
        assert (small_run[n]["ssd_bytes_read"] > 0) == (small_run[n]["misses"] > 0), n


def _blocking_case() -> list[Turn]:
    """One user's large KV (2,010 tokens: 1.6 GB of K/V) sits on SSD when its second turn
    arrives; right behind it, 20 new users whose first turns need no KV at all."""
    turns = [Turn(0, 0.0, 2000, 10, 0), Turn(0, 100.0, 10, 10, 1)]
    turns += [Turn(u, 101.0 + 0.01 * u, 20, 20, 0) for u in range(1, 21)]  # after its arrival
    return sorted(turns, key=lambda t: t.time)


def test_io_aware_scheduling_lets_ready_requests_pass_a_slow_load():
    # DRAM smaller than that KV (so it lives on SSD), and a slow SSD: the load takes seconds.
    cost = load_profile("opt13b-a800", {"host.dram_gib": 0.5, "host.watermark_gib": 0,
                                        "host.ssd_read_gbps": 0.2})
    res = simulate(_blocking_case(), ["bidaw", "bidaw-no-io", "fcfs-lru", "ideal"], cost,
                   window=(50, 1000))
    assert res["bidaw"]["misses"] == 1 and res["fcfs-lru"]["misses"] == 1
    assert res["bidaw"]["queueing_mean"] <= res["fcfs-lru"]["queueing_mean"]
    # same eviction and tensor, only the queue differs: FCFS makes 20 requests wait for the load
    assert res["bidaw"]["queueing_mean"] < 0.2 * res["bidaw-no-io"]["queueing_mean"]
    assert res["ideal"]["latency_mean"] <= res["bidaw"]["latency_mean"]


def test_closed_and_open_loop_arrivals():
    turns = [Turn(7, 10.0, 30, 40, 0), Turn(7, 110.0, 30, 40, 1)]
    cost = load_profile("opt13b-a800")
    closed = build_workload(turns, time_scale=2.0)
    log = simulate_system(closed, cost, "ideal")
    first_done = log.done[0]
    assert log.arrival[0] == pytest.approx(5.0)
    assert log.arrival[1] == pytest.approx(first_done + 50.0)  # answer + the trace's gap / 2
    log = simulate_system(build_workload(turns, time_scale=2.0, arrival_mode="open"), cost, "ideal")
    assert log.arrival[1] == pytest.approx(55.0)                # its own trace time / 2


def test_a_lone_turn_takes_exactly_the_cost_models_time():
    cost = load_profile("opt13b-a800")
    log = simulate_system(build_workload([Turn(1, 0.0, 30, 40, 0)]), cost, "ideal")
    prefill = cost.prefill_step_time(cost.prefill_flops(30, 0), 0)
    decode = sum(cost.decode_step_time(1, 31 + k) for k in range(39))
    assert log.first_token[0] == pytest.approx(prefill)
    assert log.done[0] == pytest.approx(prefill + decode)


def test_sample_users_and_window_select_turns(small_trace):
    full = build_workload(small_trace, window=(600, 1200))
    sampled = build_workload(small_trace, window=(600, 1200), sample_users=0.3)
    assert 0 < sampled.measured_count < full.measured_count
    assert all(600 <= full.trace_time[i] < 1200 for i in range(len(full)) if full.measured[i])


def test_shared_bandwidth_splits_evenly():
    ssd = SharedBandwidth(100.0)
    ssd.start("a", 100.0, 0.0)
    ssd.start("b", 50.0, 0.0)
    assert ssd.next_completion() == pytest.approx(1.0)   # b: 50 bytes at 50 B/s
    assert ssd.finish_due(1.0) == ["b"]
    assert ssd.next_completion() == pytest.approx(1.5)   # a: 50 bytes left, alone at 100 B/s
    assert ssd.finish_due(1.5) == ["a"] and len(ssd) == 0


def test_shared_bandwidth_estimates_without_changing_the_transfers():
    ssd = SharedBandwidth(100.0)
    ssd.start("a", 100.0, 0.0)
    ssd.start("b", 50.0, 0.0)
    # at t=0.5 each has moved 25: b finishes 25 bytes later at 50 B/s, a 50 bytes after that alone
    assert ssd.finish_estimates(0.5) == {"b": pytest.approx(0.5), "a": pytest.approx(1.0)}
    # a new 30-byte read waits 30 of each (75 and 25 left): (30 + 25 + 30) / 100
    assert ssd.load_estimate(30.0, 0.5) == pytest.approx(0.85)
    assert ssd.finish_due(1.0) == ["b"] and ssd.next_completion() == pytest.approx(1.5)
    assert SharedBandwidth(10.0).load_estimate(20.0, 3.0) == pytest.approx(2.0)


def test_profiles_and_overrides():
    cost = load_profile("opt13b-a800")
    assert cost.tensors.tensor == "tensor6" and cost.kv_bytes_per_token == 819200
    assert cost.stored_bytes_per_token("tensor6") == 409600
    assert cost.ssd_bytes_per_s == 1.5e9 and cost.dram_bytes == 200 << 30
    assert cost.decode_step_time(8, 10_000) < cost.decode_step_time(8, 20_000)
    nvme = load_profile("opt13b-a800-nvme", {"host.dram_gib": 120})
    assert nvme.ssd_bytes_per_s > cost.ssd_bytes_per_s and nvme.dram_bytes == 120 << 30
    with pytest.raises(ValueError, match="no field"):
        load_profile("opt13b-a800", {"host.nope": 1})


def test_system_names_and_ablations():
    spec = system_spec("bidaw-no-io-no-tensor6")
    assert spec.queue == "fcfs" and spec.tensor == "kv" and spec.eviction == "bidaw"
    assert system_spec("bidaw-no-answer").eviction == "queue-aware"
    assert system_spec("bidaw-restore").restore_choice and not system_spec("bidaw").restore_choice
    with pytest.raises(ValueError):
        system_spec("vllm")
    with pytest.raises(ValueError):
        system_spec("fcfs-lru-no-io")


def test_command_contract(tmp_path, small_trace, capsys):
    from bench.traces.bidaw_format import write_bidaw
    from services.cli.main import main

    path = tmp_path / "trace.txt"
    write_bidaw(small_trace, path)
    assert main(["simulate", "--trace", str(path), "--format", "bidaw", "--systems",
                 "recompute,bidaw,ideal", "--window", "600:1800", "--time-scale", "2",
                 "--plot", str(tmp_path / "plots"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["systems"]) == {"recompute", "bidaw", "ideal"}
    for m in out["systems"].values():
        assert CONTRACT_KEYS <= set(m)
    assert all((tmp_path / "plots" / f).exists() for f in ("latency_cdf.png", "queueing.png"))


def test_sweep_finds_more_sustainable_load_for_the_ideal(small_trace):
    from bench.sim.sweep import sweep

    cost = load_profile("opt13b-a800")
    res = sweep(small_trace, ["recompute", "ideal"], cost, target_s=3.0, metric="latency_mean",
                bisect_steps=1, window=(0, 1800))
    assert res["ideal"]["users_per_min"] >= res["recompute"]["users_per_min"] > 0


def test_sweep_with_plot_draws_each_systems_sustainable_load(tmp_path, small_trace, capsys):
    from bench.traces.bidaw_format import write_bidaw
    from services.cli.main import main

    path = tmp_path / "trace.txt"
    write_bidaw(small_trace, path)
    assert main(["simulate", "--trace", str(path), "--format", "bidaw", "--systems",
                 "recompute,ideal", "--window", "0:1800", "--sweep", "--latency-target", "3",
                 "--sweep-metric", "latency_mean", "--plot", str(tmp_path / "plots"),
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    drawn = tmp_path / "plots" / "sustainable_load.png"
    assert str(drawn) in out["plots"] and drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["sweep"]["ideal"]["users_per_min"] >= out["sweep"]["recompute"]["users_per_min"]


@pytest.mark.parametrize("item, words", [
    ("host.dram_gib=x", "host.dram_gib: want a finite number >= 0, got 'x'"),
    ("host.dram_gib=[1]", "host.dram_gib: want a finite number >= 0, got [1]"),
    ("host.dram_gib=-5", "got -5"),  # ran, on a negative DRAM
    ("host.dram_gib=.inf", "got inf"),
    ("gpu.max_batch=1.5", "gpu.max_batch: want a whole number"),
    ("host=1", "'host' is a section; set one of its fields: host.pcie_gbps"),
    ("host.nope=1", "profile has no field 'host.nope'"),  # a KeyError traceback before
    ("host.dram_gib=" + "[" * 50_000 + "]" * 50_000, "host.dram_gib: not a YAML value"),
])
def test_a_bad_set_is_one_line_naming_the_field(item, words):
    from services.cli.main import main

    with pytest.raises(SystemExit) as err:
        main(["simulate", "--profile", "opt13b-a800", "--systems", "bidaw", "--set", item])
    message = err.value.code
    assert isinstance(message, str) and message.startswith("bidaw simulate: --set "), message
    assert words in message, message


def test_a_set_keeps_the_field_type():
    cost = load_profile("opt13b-a800", {"host.dram_gib": "120", "gpu.max_batch": "64",
                                        "host.watermark_gib": "0.5"})
    assert cost.dram_bytes == 120 * (1 << 30) and cost.max_batch == 64
    assert cost.watermark_bytes == 1 << 29  # the YAML writes 2; int() made 0.5 into 0
