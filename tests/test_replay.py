"""The live replay benchmark: a short open-loop replay against the real deployment (every turn
answered with the trace's answer length, per-user order and think times respected, the report
agreeing with the raw records, the `bidaw replay` command), and pure tests of the planner,
the tier sizing, the systems and the report."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from bench.replay.client import Replayer
from bench.replay.plan import PlanConfig, make_plan
from bench.replay.records import ANSWERED, FAILED, SKIPPED, QueueSample, TurnRecord, \
    read_jsonl, write_jsonl
from bench.replay.report import (arrival_tier, combine_repeats, hit_rate_series, ratios,
                                 summarize)
from bench.replay.sizing import TierSizes, tier_sizes, working_set
from bench.replay.systems import DEFAULT_SYSTEMS, SYSTEMS, deployment_kwargs
from bench.replay.tokens import query_tokens
from bench.traces.window import busiest_window, parse_window
from bench.traces import Turn
from bench.traces.bidaw_format import write_bidaw

# Three users, three turns each, short answers; trace gaps of 20-60 s, replayed at x0.05.
LIVE_TRACE = [Turn(11, 100.0, 12, 6, 0), Turn(11, 140.0, 5, 4, 1), Turn(11, 160.0, 9, 5, 2),
              Turn(12, 104.0, 20, 3, 0), Turn(12, 130.0, 7, 7, 1), Turn(12, 190.0, 4, 2, 2),
              Turn(13, 120.0, 6, 5, 0), Turn(13, 150.0, 30, 4, 1), Turn(13, 170.0, 3, 6, 2),
              Turn(99, 900.0, 5, 5, 0)]  # outside the window
LIVE_CFG = PlanConfig(window=(100.0, 200.0), time_scale=0.05, max_context=2048)


@pytest.fixture(scope="module")
def live_replay(deployment):
    plan = make_plan(sorted(LIVE_TRACE, key=lambda t: t.time), LIVE_CFG)
    result = Replayer(deployment.scheduler_target, plan, store_target=deployment.store_target,
                      session_prefix=f"replay-{uuid.uuid4().hex[:6]}-",
                      stats_interval_s=0.2).run()
    return plan, result


def test_every_turn_is_answered_with_the_traces_answer_length(live_replay):
    plan, result = live_replay
    assert len(result.records) == plan.turns == 9
    assert all(r.status == ANSWERED for r in result.records), [r.error for r in result.records]
    for r in result.records:
        assert r.completion_tokens == r.answer_tokens
        assert r.finish_reason == "length"
        # The prompt is the whole conversation: planned history + this query, all real tokens.
        assert r.prompt_tokens == r.history_tokens + r.query_tokens


def test_turn_order_and_think_times_are_respected(live_replay):
    plan, result = live_replay
    by_user = {}
    for r in result.records:
        by_user.setdefault(r.user, []).append(r)
    assert sorted(by_user) == [11, 12, 13]
    for script in plan.users:
        recs = by_user[script.user]
        assert [r.index for r in recs] == [0, 1, 2]
        assert recs[0].sent_s >= script.start_s - 1e-3
        for prev, cur, planned in zip(recs, recs[1:], script.turns[1:]):
            assert cur.prev_end_s == prev.end_s
            assert cur.think_s == pytest.approx(planned.think_s)
            assert cur.sent_s >= prev.end_s + planned.think_s - 1e-3  # read before replying
            assert prev.sent_s < prev.first_token_s <= prev.end_s
    assert [t.think_s for t in plan.users[0].turns] == pytest.approx([0.0, 2.0, 1.0])


def test_later_turns_find_their_history_stored(live_replay):
    _, result = live_replay
    for r in result.records:
        if r.index == 0:
            assert arrival_tier(r) == "none" and r.cached_tokens == 0
        else:
            assert r.tier_at_arrival in ("dram", "ssd", "loading")
            assert r.cached_tokens > 0


def test_report_agrees_with_the_raw_records(live_replay, tmp_path):
    _, result = live_replay
    s = summarize(result.records, result.samples)
    ok = [r for r in result.records if r.status == ANSWERED]
    ttft = [r.first_token_s - r.sent_s for r in ok]
    lat = [r.end_s - r.sent_s for r in ok]
    assert s["turns"] == len(ok) and s["errors"] == 0 and s["skipped"] == 0
    assert s["ttft_mean"] == pytest.approx(np.mean(ttft))
    assert s["ttft_p99"] == pytest.approx(np.percentile(ttft, 99))
    assert s["latency_mean"] == pytest.approx(np.mean(lat))
    assert s["latency_p50"] == pytest.approx(np.median(lat))
    assert s["queueing_mean"] == pytest.approx(np.mean([r.queue_s for r in ok]))
    stored = [r for r in ok if r.tier_at_arrival in ("dram", "ssd", "loading")]
    assert s["turns_with_stored_kv"] == len(stored) == 6
    assert s["reversed_splits"] == sum(r.recomputed_tokens > 0 for r in ok) == 0  # no choice
    assert s["hit_rate"] == pytest.approx(sum(r.tier_at_arrival == "dram" for r in stored) / 6)
    span = max(r.end_s for r in ok) - min(r.sent_s for r in ok)
    assert s["throughput_turns_per_s"] == pytest.approx(len(ok) / span)
    assert s["exact_answers"] == len(ok)
    assert result.samples
    assert s["queued_max"] == max(q.ready + q.preparing for q in result.samples)
    # a user sends its next turn only after the last one ended: three users, three turns at most
    assert all(q.ready + q.preparing + q.running <= 3 for q in result.samples)
    write_jsonl(result.records, tmp_path / "r.jsonl")
    assert summarize(read_jsonl(tmp_path / "r.jsonl"), result.samples) == s


def test_a_replay_that_ends_its_sessions_leaves_no_kv_behind(deployment):
    from services.runtime.gen import common_pb2, kv_store_pb2, kv_store_pb2_grpc
    from services.runtime.grpc_util import channel

    plan = make_plan(sorted(LIVE_TRACE, key=lambda t: t.time), LIVE_CFG)
    prefix = f"ending-{uuid.uuid4().hex[:6]}-"
    result = Replayer(deployment.scheduler_target, plan, session_prefix=prefix,
                      end_after_s=0.5).run()
    assert all(r.status == ANSWERED for r in result.records)
    sessions = {r.session for r in result.records}
    assert len(sessions) == 3 and all(s.startswith(prefix) for s in sessions)
    assert result.records[1].cached_tokens > 0  # it reused KV while it went on
    import time

    deadline = time.monotonic() + 10  # the store frees them as it hears the ends
    with channel(deployment.store_target) as ch:
        stub = kv_store_pb2_grpc.KVStoreStub(ch)
        while True:
            tiers = {s: stub.Lookup(kv_store_pb2.LookupRequest(session_id=s)).tier
                     for s in sessions}
            if set(tiers.values()) == {common_pb2.TIER_NONE} or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert set(tiers.values()) == {common_pb2.TIER_NONE}, tiers


def test_replay_command_writes_json_records_and_plots(deployment, tmp_path, capsys):
    from services.cli.main import main

    trace = tmp_path / "trace.txt"
    write_bidaw([t for t in LIVE_TRACE if t.user == 12], trace)
    code = main(["replay", "--target", deployment.scheduler_target, "--store",
                 deployment.store_target, "--trace", str(trace), "--window", "100:200",
                 "--time-scale", "0.02", "--json", "--records", str(tmp_path / "rec.jsonl"),
                 "--plot", str(tmp_path / "plots")])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    records = read_jsonl(tmp_path / "rec.jsonl")
    assert out["planned_turns"] == len(records) == 3
    from_records = summarize(records)  # queue-length fields need the samples, not saved
    tiers = from_records.pop("by_arrival_tier")
    assert {k: out["summary"][k] for k in from_records} == pytest.approx(from_records, rel=1e-9)
    assert out["summary"]["by_arrival_tier"].keys() == tiers.keys()
    for tier, row in tiers.items():
        assert out["summary"]["by_arrival_tier"][tier] == pytest.approx(row, rel=1e-9)
    assert out["summary"]["exact_answers"] == 3
    for name in ("latency_cdf", "ttft_over_time", "hit_rate_over_time", "queue_lengths"):
        png = tmp_path / "plots" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_replay_against_nothing_says_so_before_it_starts(tmp_path):
    """It used to run its whole plan of failed turns against nothing and exit 0."""
    from services.cli.main import main
    from services.launch.launcher import free_port

    trace = tmp_path / "trace.txt"
    write_bidaw(LIVE_TRACE, trace)
    port = free_port()
    with pytest.raises(SystemExit) as err:
        main(["replay", "--target", f"127.0.0.1:{port}", "--trace", str(trace)])
    assert str(err.value.code).startswith(f"bidaw replay: --target 127.0.0.1:{port}: UNAVAILABLE")
    assert str(err.value.code).endswith("(is the deployment running?)")


def test_replay_without_the_cluster_token_says_so_before_it_starts(deployment, tmp_path):
    """Every turn used to fail UNAUTHENTICATED, reported as errors in a table, exit 0."""
    trace = tmp_path / "trace.txt"
    write_bidaw(LIVE_TRACE, trace)
    env = {k: v for k, v in os.environ.items() if "TOKEN" not in k}
    done = subprocess.run([sys.executable, "-m", "services.cli.main", "replay", "--target",
                           deployment.scheduler_target, "--trace", str(trace)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"bidaw replay: --target {deployment.scheduler_target}: UNAUTHENTICATED: internal gRPC "
        "needs the cluster token (gRPC metadata x-bidaw-cluster-token) (give "
        "--cluster-token-file FILE: `bidaw up` prints its path)")


# -- pure: planner, sizing, systems, report --------------------------------------------------

def test_systems_map_to_deployments():
    assert set(DEFAULT_SYSTEMS) == {"recompute", "fcfs-lru", "cachedattention", "bidaw",
                                    "bidaw-size", "ideal"}
    sizes = TierSizes(dram_bytes=10 << 20, ideal_dram_bytes=1 << 30, ssd_bytes=2 << 30,
                      ssd_read_gbps_cap=0.01)
    ca = deployment_kwargs(SYSTEMS["cachedattention"], sizes, model="m")
    assert (ca["policy"], ca["eviction"], ca["dram_bytes"]) == ("fcfs", "queue-aware",
                                                                  str(10 << 20))
    assert ca["extra_args"]["scheduler"][-2:] == ["--prefetch-window", "30"]
    assert "--ssd-read-gbps-cap" in ca["extra_args"]["store"]
    bidaw = deployment_kwargs(SYSTEMS["bidaw"], sizes, model="m")
    assert (bidaw["policy"], bidaw["eviction"]) == ("bidaw", "bidaw")
    assert "--prefetch-window" not in bidaw["extra_args"]["scheduler"]
    assert deployment_kwargs(SYSTEMS["ideal"], sizes, model="m")["dram_bytes"] == str(1 << 30)
    assert deployment_kwargs(SYSTEMS["recompute"], sizes, model="m")["use_store"] is False
    assert bidaw["extra_args"]["worker"] == []  # the worker's own batch size
    capped = deployment_kwargs(SYSTEMS["bidaw"], sizes, model="m", max_batch=6)
    assert capped["extra_args"]["worker"] == ["--max-batch", "6"]
    sync = deployment_kwargs(SYSTEMS["fcfs-lru"], sizes, model="m")  # vLLM + LMCache
    assert sync["extra_args"]["scheduler"][-2:] == ["--ssd-aware", "false"]
    assert sync["extra_args"]["worker"] == ["--restore-in-step", "true", "--kv-format", "kv"]
    loads_first = deployment_kwargs(SYSTEMS["fcfs-lru-head"], sizes, model="m")
    assert "--ssd-aware" not in loads_first["extra_args"]["scheduler"]
    assert loads_first["extra_args"]["worker"] == ["--kv-format", "kv"]
    # The baselines store K/V; Bidaw and the ideal let the model choose (tensor 6 for MHA).
    for name in ("fcfs-lru", "fcfs-lru-head", "cachedattention", "bidaw-no-tensor6"):
        assert SYSTEMS[name].kv_format == "kv", name
    for name in ("bidaw", "bidaw-size", "bidaw-sched-only", "bidaw-evict-only", "ideal"):
        assert SYSTEMS[name].kv_format == "auto", name
    assert "--kv-format" not in deployment_kwargs(SYSTEMS["recompute"], sizes,
                                                  model="m")["extra_args"]["worker"]
    # --ssd-burst-bytes 0: a disk that reads at the cap's rate however long it was idle
    assert "--ssd-read-burst-bytes" not in bidaw["extra_args"]["store"]
    strict = TierSizes(10 << 20, 1 << 30, 2 << 30, 0.01, ssd_read_burst_bytes=0)
    assert deployment_kwargs(SYSTEMS["bidaw"], strict, model="m")["extra_args"]["store"][-2:] \
        == ["--ssd-read-burst-bytes", "0"]

def _trace() -> list[Turn]:
    turns = [Turn(1, 0.0, 10, 20, 0), Turn(1, 30.0, 5, 40, 1), Turn(1, 100.0, 8, 8, 2),
             Turn(2, 50.0, 3, 3, 0), Turn(2, 55.0, 4, 4, 1), Turn(3, 52.0, 7, 9, 0),
             Turn(3, 58.0, 7, 9, 1), Turn(4, 500.0, 1, 1, 0)]
    return sorted(turns, key=lambda t: t.time)


def test_busiest_window_counts_turns_in_half_open_interval():
    assert busiest_window(_trace(), 10.0) == (50.0, 60.0)  # 50, 52, 55, 58
    assert busiest_window(_trace(), 1000.0) == (0.0, 1000.0)
    assert parse_window("10:20") == (10.0, 20.0)
    with pytest.raises(ValueError):
        parse_window("20:10")


def test_plan_scales_times_and_keeps_turn_order():
    plan = make_plan(_trace(), PlanConfig(window=(0.0, 200.0), time_scale=0.1))
    assert [u.user for u in plan.users] == [1, 2, 3]  # by first send time
    u1 = plan.users[0]
    assert u1.start_s == 0.0
    assert [t.think_s for t in u1.turns] == pytest.approx([0.0, 3.0, 7.0])
    assert [t.history_tokens for t in u1.turns] == [0, 30, 75]
    assert [t.answer_len for t in u1.turns] == [20, 40, 8]
    assert plan.users[1].start_s == pytest.approx(5.0)
    assert plan.turns == 7 and plan.users_in_window == 3


def test_plan_samples_users_reproducibly_and_caps_rounds():
    cfg = PlanConfig(window=(0.0, 200.0), users=2, max_rounds=1, seed=3)
    a, b = make_plan(_trace(), cfg), make_plan(_trace(), cfg)
    assert a == b and len(a.users) == 2
    assert all(len(u.turns) == 1 for u in a.users)


def test_conversation_past_the_context_starts_a_new_session_and_long_turns_are_clamped():
    trace = [Turn(7, 0.0, 40, 40, 0), Turn(7, 1.0, 40, 40, 1), Turn(7, 2.0, 500, 500, 2)]
    plan = make_plan(trace, PlanConfig(window=(0.0, 10.0), max_context=128))
    t = plan.users[0].turns
    assert [x.session for x in t] == ["u7", "u7.1", "u7.2"]
    assert [x.history_tokens for x in t] == [0, 0, 0]
    assert (t[2].query_len, t[2].answer_len, t[2].clamped) == (64, 64, True)
    assert all(x.prompt_tokens + x.answer_len <= 128 for x in t)


def test_query_tokens_are_seeded_and_avoid_special_ids():
    a = query_tokens(0, 5, 2, 200)
    assert a == query_tokens(0, 5, 2, 200) and a != query_tokens(1, 5, 2, 200)
    assert all(100 <= x < 32000 for x in a)
    assert all(17 <= x < 40 for x in query_tokens(0, 1, 0, 500, (17, 40)))


def test_working_set_counts_kv_awaiting_reuse_and_sizes_tiers():
    plan = make_plan(_trace(), PlanConfig(window=(0.0, 200.0)))
    ws = working_set(plan, bytes_per_token=10)
    # From t=52 to 55: user 1 holds 75 tokens (until 100), user 2 6 (until 55), user 3 16.
    assert ws.peak_bytes == (75 + 6 + 16) * 10
    assert ws.total_bytes == (91 + 14 + 32) * 10
    assert ws.reuses == 4
    sizes = tier_sizes(ws, ratio=2.0, load_s=0.5)
    assert sizes.dram_bytes == max(1 << 20, ws.total_bytes // 2)
    assert sizes.ideal_dram_bytes > ws.total_bytes
    assert sizes.ssd_read_gbps_cap == pytest.approx(ws.reuse_bytes_median / 0.5 / 1e9, abs=1e-6)
    assert tier_sizes(ws, dram_bytes=123, ssd_read_gbps_cap=0.0).dram_bytes == 123


def _rec(i: int, status: str = ANSWERED, tier: str = "dram", sent: float = 0.0,
         first: float = 1.0, end: float = 2.0, queue: float = 0.1) -> TurnRecord:
    return TurnRecord(user=i, index=0, session=f"s{i}", trace_round=0, history_tokens=0,
                      query_tokens=5, answer_tokens=4, think_s=0.0, scheduled_s=sent,
                      status=status, sent_s=sent, first_token_s=first, end_s=end,
                      tier_at_arrival=tier, prompt_tokens=5, completion_tokens=4, queue_s=queue)


def test_summary_from_records():
    recs = [_rec(0, tier="none", sent=0, first=1, end=2), _rec(1, tier="dram", sent=1, first=2,
            end=5), _rec(2, tier="ssd", sent=2, first=5, end=9, queue=0.7),
            _rec(3, status=FAILED), _rec(4, status=SKIPPED)]
    s = summarize(recs, [QueueSample(0, 1, 2, 1), QueueSample(1, 3, 0, 1)])
    assert (s["turns"], s["errors"], s["skipped"]) == (3, 1, 1)
    assert s["ttft_mean"] == pytest.approx((1 + 1 + 3) / 3)
    assert s["latency_mean"] == pytest.approx((2 + 4 + 7) / 3)
    assert s["latency_p50"] == pytest.approx(4)
    assert s["queueing_mean"] == pytest.approx(0.3)
    assert (s["hit_rate"], s["dram_hits"], s["turns_with_stored_kv"]) == (0.5, 1, 2)
    assert s["throughput_turns_per_s"] == pytest.approx(3 / 9)
    assert s["exact_answers"] == 3
    assert s["ready_queue_mean"] == 2 and s["queued_max"] == 3
    assert s["by_arrival_tier"]["ssd"] == {"turns": 1, "latency_mean": 7.0,
                                           "queueing_mean": pytest.approx(0.7)}
    assert sorted(s["by_arrival_tier"]) == ["dram", "none", "ssd"]
    assert hit_rate_series(recs, 1.5) == [(0.75, 1.0, 1), (2.25, 0.0, 1)]


def test_hit_falls_back_to_the_workers_tier_without_a_lookup():
    r = _rec(0, tier="")
    r.kv_tier, r.cached_tokens = "ssd", 3
    assert summarize([r])["hit_rate"] == 0.0 and summarize([r])["turns_with_stored_kv"] == 1


def test_repeated_runs_combine_into_means_totals_and_spread():
    runs = [{"latency_mean": 2.0, "ttft_mean": 1.0, "queueing_mean": 0.5, "hit_rate": 0.5,
             "turns": 10, "errors": 0, "store": {"x": 1}},
            {"latency_mean": 4.0, "ttft_mean": 2.0, "queueing_mean": 1.5, "hit_rate": 0.7,
             "turns": 9, "errors": 1, "store": {"x": 2}}]
    row = combine_repeats(runs)
    assert row["latency_mean"] == pytest.approx(3.0) and row["hit_rate"] == pytest.approx(0.6)
    assert row["turns"] == 19 and row["errors"] == 1 and "store" not in row
    assert row["spread"]["latency_mean"] == [2.0, 4.0] and row["repeats"] == runs
    assert combine_repeats(runs[:1]) == runs[0]


def test_ratios_and_records_round_trip(tmp_path):
    rows = {"bidaw": {"latency_mean": 2.0, "ttft_mean": 1.0},
            "ideal": {"latency_mean": 1.6, "ttft_mean": 0.5},
            "fcfs-lru": {"latency_mean": 5.0, "ttft_mean": 4.0},
            "fcfs-lru-head": {"latency_mean": 3.0, "ttft_mean": 1.5}}
    r = ratios(rows)
    assert r["bidaw/ideal_latency_mean"] == pytest.approx(1.25)
    assert r["fcfs-lru/bidaw_latency_mean"] == pytest.approx(2.5)
    assert r["fcfs-lru-head/bidaw_ttft_mean"] == pytest.approx(1.5)
    assert "cachedattention/bidaw_latency_mean" not in r  # only systems that ran
    recs = [_rec(0), _rec(1, status=FAILED)]
    write_jsonl(recs, tmp_path / "r.jsonl")
    assert read_jsonl(tmp_path / "r.jsonl") == recs
