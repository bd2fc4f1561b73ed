"""`bidaw replay`: replay a trace against a running deployment (open loop, per-user think times)."""
from __future__ import annotations

import argparse
import json
import sys
import time

from services.runtime.arg_types import non_negative


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    from bench.replay.args import add_client_signal_args, add_plan_args

    p = sub.add_parser(
        "replay", help="replay a trace against a live deployment (open loop)",
        description="Each user's first turn is sent at its (scaled) trace time, each next one "
        "the (scaled) trace think time after the previous answer arrived. Prompts are the whole "
        "conversation's token ids; answers have the trace's length (max_tokens + ignore_eos).")
    p.add_argument("--target", required=True, help="scheduler address HOST:PORT")
    add_plan_args(p, users=0, time_scale=1.0, max_rounds=0, max_context=2048)
    p.add_argument("--store", default="", help="KV store HOST:PORT: look up where each "
                   "session's KV is when its turn is sent (needed for a true DRAM hit rate)")
    p.add_argument("--session-prefix", default=None,
                   help="prefix of session ids (default: unique per run)")
    p.add_argument("--deadline", type=non_negative, default=0.0,
                   help="send no turn after this many seconds (0: none)")
    add_client_signal_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="DIR", help="write PNG figures here")
    p.add_argument("--records", metavar="FILE.jsonl", help="write the per-turn records here")
    from services.runtime.tls import add_client_args

    add_client_args(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from bench.replay.args import check_prepare_share, describe, plan_config
    from bench.replay.client import Replayer
    from bench.replay.plan import make_plan
    from bench.replay.records import write_jsonl
    from bench.replay.report import summarize
    from bench.replay.source import load_turns
    from bench.replay.table import render
    from bench.traces.turn import TraceError
    from services.runtime.tls import configure_client

    check_prepare_share(args, "replay")
    configure_client(args, "replay")
    try:  # the trace first: a file's fault needs no deployment to be found
        plan = make_plan(load_turns(args.trace, args.format, args.seed), plan_config(args))
    except TraceError:
        raise  # the CLI says where and why in one line, naming --trace
    except ValueError as exc:
        print(f"bidaw: {exc}", file=sys.stderr)
        return 2
    _check_targets(args)
    print(describe(plan), file=sys.stderr, flush=True)
    prefix = args.session_prefix if args.session_prefix is not None else f"r{int(time.time())}-"
    bar = tqdm(total=plan.turns, unit="turn", file=sys.stderr, dynamic_ncols=True)
    result = Replayer(args.target, plan, store_target=args.store, session_prefix=prefix,
                      deadline_s=args.deadline, end_after_s=args.end_sessions_after,
                      prepare_lead_s=args.prepare_lead_s, prepare_share=args.prepare_share,
                      on_record=lambda r: bar.update()).run()
    bar.close()
    summary = summarize(result.records, result.samples)
    if args.records:
        write_jsonl(result.records, args.records)
    if args.plot:
        from bench.replay.plots import write_all

        write_all({"replay": (result.records, result.samples)}, args.plot)
    if args.json:
        print(json.dumps({"summary": summary, "window": plan.window, "users": len(plan.users),
                          "planned_turns": plan.turns,
                          "end_sessions_after_s": args.end_sessions_after,
                          "prepare_lead_s": args.prepare_lead_s,
                          "prepare_share": args.prepare_share}))
    else:
        print(render({"replay": summary}))
    return 0


def _check_targets(args: argparse.Namespace) -> None:
    """Each address answers an authenticated read-only call, or the command stops in one line."""
    from services.runtime.gen import kv_store_pb2, kv_store_pb2_grpc, scheduler_pb2, \
        scheduler_pb2_grpc
    from services.runtime.grpc_util import why_unanswered

    probes = (("--target", args.target, lambda ch, t: scheduler_pb2_grpc.SchedulerStub(ch).Stats(
                  scheduler_pb2.SchedulerStatsRequest(), timeout=t)),
              ("--store", args.store, lambda ch, t: kv_store_pb2_grpc.KVStoreStub(ch).Stats(
                  kv_store_pb2.StoreStatsRequest(), timeout=t)))
    for flag, target, probe in probes:
        if target and (why := why_unanswered(target, probe)):
            raise SystemExit(f"bidaw replay: {flag} {target}: {why}")
