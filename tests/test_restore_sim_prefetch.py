"""bidaw-prefetch in the timed simulator (predictive promotion + the load-or-recompute choice,
also asked at arrival), on hand-made workloads whose answer is known."""
from __future__ import annotations

from bench.sim.cost_profile import load_profile
from bench.sim.engine import simulate_system
from bench.sim.timed import simulate
from bench.sim.workload import build_workload
from bench.traces import Turn

HISTORY = 1500  # tokens of each first turn: 0.62 GB of tensor 6


def _cost(dram_gib: float, ssd_gbps: float = 1.5):
    return load_profile("opt13b-a800", {"host.dram_gib": dram_gib, "host.watermark_gib": 0,
                                        "host.ssd_read_gbps": ssd_gbps})


def _alternating() -> list[Turn]:
    """Two users taking turns every 30 s; DRAM (1 GiB) holds one KV, so each arrival evicts
    the other user's, who is back 30 s later, every time."""
    turns = [Turn(u, 30.0 * (u - 1) + 60.0 * r, HISTORY if r == 0 else 10, 10, r)
             for r in range(10) for u in (1, 2)]
    return sorted(turns, key=lambda t: t.time)


def _together(users: int = 5) -> list[Turn]:
    """`users` long first turns, then all return within 40 ms."""
    turns = [Turn(u, 10.0 * u, HISTORY, 10, 0) for u in range(users)]
    turns += [Turn(u, 140.0 + 0.01 * u, 10, 10, 1) for u in range(users)]
    return sorted(turns, key=lambda t: t.time)


def test_the_user_expected_back_is_promoted_before_it_returns():
    res = simulate(_alternating(), ["bidaw-size", "bidaw-prefetch"], _cost(1.0),
                   window=(100, 1000))
    demand, mine = res["bidaw-size"], res["bidaw-prefetch"]
    assert demand["turns"] == mine["turns"] == 16
    assert (demand["hits"], demand["misses"]) == (0, 16)  # every return waits for its load
    assert (mine["hits"], mine["misses"]) == (16, 0)      # every return finds its KV in DRAM
    assert mine["prefetch_hits"] == mine["prefetches"] == 16
    # the same bytes, read before they were needed; no demand read left
    assert mine["speculative_read_bytes"] == demand["ssd_bytes_read"] > 0
    assert mine["ssd_bytes_read"] == 0
    assert mine["ttft_mean"] < 0.2 * demand["ttft_mean"]


def test_a_return_during_its_own_slow_promotion_recomputes_without_a_second_read():
    # 0.01 GB/s: a promotion takes a minute, so the users come back while it is in flight
    res = simulate(_alternating(), ["bidaw-size", "bidaw-prefetch"], _cost(1.0, 0.01),
                   window=(100, 1000))
    demand, mine = res["bidaw-size"], res["bidaw-prefetch"]
    assert mine["turns"] == 16 and mine["ssd_bytes_read"] == 0
    assert mine["adopted"] == 0 and mine["restore_choices"]["recompute"] == mine["misses"] > 0
    assert mine["ttft_mean"] < 0.01 * demand["ttft_mean"]


def test_a_disk_backlog_at_arrival_makes_the_last_ones_recompute_at_once():
    # 4 GB/s: one load (0.15 s) beats a recompute (0.23 s), five in a row do not
    res = simulate(_together(), ["bidaw-restore", "bidaw-prefetch"], _cost(0.5, 4.0),
                   window=(100, 1000))
    asked_late, mine = res["bidaw-restore"], res["bidaw-prefetch"]
    assert asked_late["restore_choices"] == {"wait": 5, "recompute": 0, "split": 0}
    assert mine["restore_choices"]["recompute"] >= 1 and mine["turns"] == 5
    assert mine["ssd_bytes_read"] < asked_late["ssd_bytes_read"]
    assert mine["ttft_mean"] < asked_late["ttft_mean"]


def test_a_kv_larger_than_dram_is_never_promoted():
    res = simulate(_together(), ["bidaw-prefetch"], _cost(0.5, 4.0), window=(100, 1000))
    assert res["bidaw-prefetch"]["prefetches"] == 0  # it would be evicted as it landed


def test_every_turn_completes_on_a_busy_synthetic_trace():
    from bench.traces import SynthConfig, synthesize

    turns = synthesize(SynthConfig(users=120, users_per_min=30, seed=3))
    workload = build_workload(turns, window=(600, 3000), time_scale=2.0)
    cost = load_profile("opt13b-a800", {"host.dram_gib": 12, "host.watermark_gib": 0.5})
    log = simulate_system(workload, cost, "bidaw-prefetch")
    assert len(log.arrival) == workload.measured_count
    assert log.promotions["prefetches"] > 0 and sum(log.restore_choices.values()) > 0
