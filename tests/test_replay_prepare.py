"""Replay clients that say a conversation's next turn is coming (`--prepare-lead-s`): the
Replayer calls the scheduler's PrepareSession for the session of each continuing turn R seconds
before sending it, never before the previous answer's end, never for a first turn nor for a turn
that starts a new session, and never lets a slow prepare delay its turn. Against the fake
scheduler (a real gRPC server) with hand-made plans; the live deployment's run shows the
prepared turns in the report; the commands refuse bad values by flag."""
from __future__ import annotations

import uuid

import grpc
import pytest

from bench.replay.client import Replayer
from bench.replay.plan import Plan, PlanConfig, ScriptedTurn, UserScript
from bench.replay.records import ANSWERED
from bench.replay.report import arrival_tier, summarize
from bench.replay.table import render
from bench.sim.prepare_hints import prepares
from tests.fake_scheduler import start_fake_scheduler

LEAD = 0.3
SLACK = 0.2  # event-loop and RPC jitter on a busy machine


def _turn(index: int, session: str, history: int, think: float) -> ScriptedTurn:
    return ScriptedTurn(index=index, trace_round=index, trace_time=0.0, session=session,
                        history_tokens=history, query_len=4, answer_len=2, think_s=think)


# User 2: a second turn whose prepare is said LEAD before it (think time > LEAD), then a new
# session (history 0: nothing to prepare), then a turn whose think time is shorter than LEAD
# (said as the answer before it ends). User 4: one continuing turn.
PLAN = Plan(config=PlanConfig(), window=(0.0, 1.0), users=(
    UserScript(user=2, start_s=0.0, turns=(
        _turn(0, "u2", 0, 0.0), _turn(1, "u2", 10, 0.8), _turn(2, "u2.1", 0, 0.5),
        _turn(3, "u2.1", 12, 0.1))),
    UserScript(user=4, start_s=0.2, turns=(_turn(0, "u4", 0, 0.0), _turn(1, "u4", 9, 0.6))),
))


@pytest.fixture
def fake():
    server, scheduler = start_fake_scheduler()
    yield f"127.0.0.1:{server.port}", scheduler
    server.stop(0)


def _replay(target: str, plan: Plan = PLAN, **kw) -> tuple[str, list]:
    prefix = f"prep-{uuid.uuid4().hex[:6]}-"
    result = Replayer(target, plan, session_prefix=prefix, stats_interval_s=0.2, **kw).run()
    assert all(r.status == ANSWERED for r in result.records), [r.error for r in result.records]
    return prefix, result.records


def test_each_continuing_turn_is_prepared_lead_seconds_before_it_and_after_the_answer(fake):
    target, scheduler = fake
    prefix, records = _replay(target, prepare_lead_s=LEAD)
    prepared = [r for r in records if r.prepared_tier]
    assert [(r.user, r.index) for r in prepared] == [(2, 1), (2, 3), (4, 1)]
    for r in records:
        if r not in prepared:  # first turns and the new session
            assert r.history_tokens == 0 and r.prepared_s == 0.0
    # the fake starts a load for a stored session the first time it is prepared
    assert [r.prepared_tier for r in prepared] == ["loading"] * 3
    for r in prepared:
        said = max(r.prev_end_s, r.scheduled_s - LEAD)
        assert r.prev_end_s <= r.prepared_s <= said + SLACK, r
        assert r.prepared_s < r.sent_s
        assert r.sent_s - r.scheduled_s < SLACK  # the turn went out on time all the same
    by_turn = {(r.user, r.index): r for r in records}
    assert by_turn[2, 1].prepared_s >= by_turn[2, 1].scheduled_s - LEAD - 1e-3  # not earlier
    assert by_turn[2, 3].prepared_s < by_turn[2, 3].scheduled_s - by_turn[2, 3].think_s + SLACK
    # the scheduler heard them in that order, each prepare between the two turns of its session
    assert sorted(s for _, s in scheduler.prepared) == sorted(
        prefix + s for s in ("u2", "u2.1", "u4"))
    assert all(tenant == "" for tenant, _ in scheduler.prepared)
    for session in ("u2", "u2.1", "u4"):
        calls = [rpc for rpc, s, _ in scheduler.calls if s == prefix + session]
        assert calls == ["SubmitTurn", "PrepareSession", "SubmitTurn"], (session, calls)
    for r in prepared:  # the server's clock agrees: prepare after the answer, before the turn
        times = [t for _, s, t in scheduler.calls if s == r.session]
        assert times[0] < times[1] < times[2]
    s = summarize(records)
    # no store looked up: the hit is the worker's tier, which the fake says is DRAM
    assert (s["prepared_turns"], s["prepared_dram_hits"]) == (3, 3)
    assert s["prepared_lead_mean"] == pytest.approx(
        sum(r.sent_s - r.prepared_s for r in prepared) / 3)
    assert 0 < s["prepared_lead_mean"] <= LEAD + SLACK
    assert "prepared" in render({"replay": s}) and "prepared" not in render(
        {"replay": summarize(records[:1])})


def test_without_a_lead_or_outside_the_share_nothing_is_prepared(fake):
    target, scheduler = fake
    _, records = _replay(target)
    assert not scheduler.prepared and not any(r.prepared_tier for r in records)
    _, records = _replay(target, prepare_lead_s=LEAD, prepare_share=0.0)
    assert not scheduler.prepared
    assert (prepares(2, 0.5), prepares(4, 0.5), prepares(3, 0.5)) == (True, True, False)
    odd = Plan(config=PlanConfig(), window=(0.0, 1.0), users=(
        UserScript(user=3, start_s=0.0, turns=(_turn(0, "u3", 0, 0.0), _turn(1, "u3", 9, 0.3))),
        UserScript(user=4, start_s=0.0, turns=(_turn(0, "u4", 0, 0.0), _turn(1, "u4", 9, 0.3)))))
    prefix, records = _replay(target, odd, prepare_lead_s=0.1, prepare_share=0.5)
    assert [s for _, s in scheduler.prepared] == [prefix + "u4"]  # user 3's client does not
    with pytest.raises(ValueError, match="--prepare-share"):
        Replayer(target, PLAN, prepare_lead_s=1.0, prepare_share=1.5)
    with pytest.raises(ValueError, match="--prepare-lead-s"):
        Replayer(target, PLAN, prepare_lead_s=-1.0)


def test_a_slow_or_failing_prepare_does_not_delay_its_turn(fake, caplog):
    target, scheduler = fake
    scheduler.prepare_delay_s = 1.0  # a store that takes a second to answer
    plan = Plan(config=PlanConfig(), window=(0.0, 1.0), users=(UserScript(
        user=2, start_s=0.0, turns=(_turn(0, "u2", 0, 0.0), _turn(1, "u2", 9, 0.3),
                                    _turn(2, "u2", 20, 0.3))),))
    _, records = _replay(target, plan, prepare_lead_s=0.2)
    for r in records[1:]:
        assert r.sent_s - r.scheduled_s < SLACK, r  # sent before the prepare's reply came
        assert r.sent_s - r.prepared_s < 0.2 + SLACK
    # the replies were still recorded: the first prepare started a load, the second found DRAM
    assert [r.prepared_tier for r in records] == ["", "loading", "dram"]

    scheduler.prepare_delay_s = 0.0
    scheduler.prepare_error = grpc.StatusCode.UNIMPLEMENTED  # an older scheduler
    records = Replayer(target, plan, session_prefix="gone-", prepare_lead_s=0.2).run().records
    assert all(r.status == ANSWERED for r in records)
    assert [r.prepared_tier for r in records] == ["", "error", "error"]
    assert "preparing session gone-u2 failed: UNIMPLEMENTED" in caplog.text


# -- the live deployment: 4 MiB of DRAM, the real store ---------------------------------------

@pytest.fixture(scope="module")
def own_deployment(tmp_path_factory):
    """conftest's deployment (4 MiB of DRAM), but its own: the session's holds every earlier
    test's sessions in those 4 MiB (in two full runs a prepared turn then found its KV neither
    in DRAM nor loading at arrival; alone it passed)."""
    from services.launch.launcher import LocalDeployment

    with LocalDeployment(data_dir=str(tmp_path_factory.mktemp("prepare")), dram_bytes="4MiB",
                         default_max_tokens=32, supervise=False) as dep:
        yield dep


def test_a_live_replay_with_prepares_reports_its_prepared_turns(own_deployment):
    deployment = own_deployment
    from tests.test_replay import LIVE_CFG, LIVE_TRACE
    from bench.replay.plan import make_plan

    plan = make_plan(sorted(LIVE_TRACE, key=lambda t: t.time), LIVE_CFG)
    result = Replayer(deployment.scheduler_target, plan, store_target=deployment.store_target,
                      session_prefix=f"prepared-{uuid.uuid4().hex[:6]}-",
                      prepare_lead_s=0.5).run()
    records = result.records
    assert all(r.status == ANSWERED for r in records), [r.error for r in records]
    later = [r for r in records if r.index > 0]
    assert len(later) == 6 and all(r.history_tokens > 0 for r in later)
    assert all(r.prepared_tier in ("dram", "loading") for r in later), \
        [r.prepared_tier for r in later]  # the store held each session's KV
    assert not any(r.prepared_tier for r in records if r.index == 0)
    s = summarize(records)
    assert s["prepared_turns"] == 6
    assert s["prepared_dram_hits"] == sum(arrival_tier(r) == "dram" for r in later)
    assert s["prepared_dram_hits"] >= 1
    # a prepare that found the KV on SSD started its promotion (here, typically each third turn:
    # 4 MiB of DRAM holds ~91 tokens); the turn then never found it on SSD (pinned till read)
    assert all(r.tier_at_arrival in ("dram", "loading") for r in later
               if r.prepared_tier == "loading")
    assert "prep. DRAM" in render({"replay": s})


# -- the commands ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["bench", "live"], ["replay", "--target", "127.0.0.1:1"]])
@pytest.mark.parametrize("flags, error", [
    (["--prepare-lead-s", "-1"], "argument --prepare-lead-s: must be >= 0, got -1"),
    (["--prepare-lead-s", "soon"], "argument --prepare-lead-s: not a number: 'soon'"),
    (["--prepare-lead-s", "2", "--prepare-share", "1.5"],
     "argument --prepare-share: must be in [0, 1], got 1.5"),
    (["--prepare-share", "-0.1"], "argument --prepare-share: must be in [0, 1], got -0.1"),
])
def test_the_commands_refuse_a_bad_lead_or_share_by_flag(command, flags, error, capsys):
    from services.cli.main import main

    with pytest.raises(SystemExit) as err:
        main([*command, *flags])
    assert err.value.code == 2 and error in capsys.readouterr().err


def test_the_commands_take_the_options():
    from bench.replay.args import check_prepare_share
    from services.cli.main import build_parser

    for command in (["bench", "live"], ["replay", "--target", "127.0.0.1:1"]):
        args = build_parser().parse_args([*command, "--prepare-lead-s", "5",
                                          "--prepare-share", "0.5"])
        assert (args.prepare_lead_s, args.prepare_share) == (5.0, 0.5)
        args = build_parser().parse_args(command)
        check_prepare_share(args, command[0])  # each command's first step: the default share
        assert (args.prepare_lead_s, args.prepare_share) == (None, 1.0)


def test_bench_live_passes_the_options_to_each_run_and_records_them(monkeypatch, capsys):
    """The plumbing without a deployment: each system's run gets them, the JSON's config says
    them, and the row counts the prepared turns its records show."""
    import json

    import bench.replay.live as live
    from bench.replay.client import ReplayResult
    from bench.replay.records import TurnRecord
    from services.cli.main import main

    seen = []

    def run_system(name, system, plan, sizes, opts, on_record=None):
        seen.append(opts)
        rec = TurnRecord(user=2, index=1, session="u2", trace_round=1, history_tokens=9,
                         query_tokens=4, answer_tokens=2, think_s=1.0, scheduled_s=1.0,
                         status=ANSWERED, sent_s=1.0, first_token_s=1.5, end_s=2.0,
                         tier_at_arrival="dram", prepared_s=0.5, prepared_tier="loading")
        return live.SystemRun(name, ReplayResult([rec], [], 2.0), {}, 0.0)

    monkeypatch.setattr(live, "run_system", run_system)
    assert main(["bench", "live", "--format", "synthetic", "--users", "3", "--max-rounds", "2",
                 "--systems", "bidaw", "--prepare-lead-s", "3", "--prepare-share", "0.5",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(o.prepare_lead_s, o.prepare_share) for o in seen] == [(3.0, 0.5)]
    assert (out["config"]["prepare_lead_s"], out["config"]["prepare_share"]) == (3.0, 0.5)
    row = out["systems"]["bidaw"]
    assert (row["prepared_turns"], row["prepared_dram_hits"]) == (1, 1)
    assert row["prepared_lead_mean"] == pytest.approx(0.5)


def test_a_turn_scheduled_past_the_deadline_is_not_waited_for(fake):
    # user 2's second turn is due 30 s after its first answer, far past a 1 s deadline: the
    # replay ends at once instead of sleeping until then to find it may not send it
    import time

    target, _ = fake
    plan = Plan(config=PlanConfig(), window=(0.0, 1.0), users=(UserScript(user=2, start_s=0.0,
                turns=(_turn(0, "u2", 0, 0.0), _turn(1, "u2", 10, 30.0))),))
    start = time.monotonic()
    records = Replayer(target, plan, session_prefix=f"dl-{uuid.uuid4().hex[:6]}-",
                       deadline_s=1.0, stats_interval_s=0.2, prepare_lead_s=LEAD).run().records
    assert time.monotonic() - start < 10
    assert [r.status == ANSWERED for r in records] == [True, False]
    assert records[1].prepared_s == 0.0 and records[1].sent_s == 0.0
