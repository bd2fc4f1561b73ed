"""`bidaw bench policies`: decision times of the pure policies and the cache-only simulator speed."""
from __future__ import annotations

import argparse
import json
import sys

from bench.traces.loaders import FORMATS
from services.runtime.arg_types import positive_int

POLICIES = ("fifo", "lru", "queue-aware", "bidaw", "bidaw-size", "belady")


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = groups["bench"].add_parser(
        "policies", help="scheduling / eviction decision times and cache-only turns per second",
        description="Median scheduling decision (disk-HRRN pick + promote + dispatch + enqueue) at "
        "--queued requests, median eviction decision (victim + remove + admit) at --sessions "
        "sessions, and cache-only replay speed. Paper: 0.62 ms and 0.35 ms per decision.")
    p.add_argument("--queued", type=positive_int, default=10_000,
                   help="requests in the scheduler's queues")
    p.add_argument("--sessions", type=positive_int, default=100_000,
                   help="sessions in the eviction policy")
    p.add_argument("--decisions", type=positive_int, default=2_000,
                   help="decisions timed per figure")
    p.add_argument("--evict-policy", default="bidaw", help="policy timed for evict_decision_ms_p50")
    p.add_argument("--trace", help="trace for the cache-only speed (default: a synthetic one)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="trace format")
    p.add_argument("--policies", default=",".join(POLICIES),
                   help="policies replayed for cache_only_turns_per_s (aggregate over all)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.policy_bench import cache_only_turns_per_s, evict_decision_ms, schedule_decision_ms

    def say(msg: str) -> None:
        if not args.json:
            print(msg, file=sys.stderr, flush=True)

    say(f"scheduling decisions at {args.queued} queued requests ...")
    sched = schedule_decision_ms(args.queued, args.decisions)
    say(f"eviction decisions ({args.evict_policy}) at {args.sessions} sessions ...")
    evict = evict_decision_ms(args.evict_policy, args.sessions, args.decisions)
    if args.trace:
        from bench.traces import load_trace

        turns = load_trace(args.trace, args.format)
    else:
        from bench.traces import synthesize

        turns = synthesize()
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    speed = cache_only_turns_per_s(turns, policies, on_policy=lambda n: say(f"cache-only replay: {n} ..."))
    out = {
        "schedule_decision_ms_p50": round(sched["decision_ms_p50"], 5),
        "evict_decision_ms_p50": round(evict["decision_ms_p50"], 5),
        "cache_only_turns_per_s": round(speed["all"], 1),
        "detail": {
            "queued": sched["queued"], "sessions": evict["sessions"],
            "evict_policy": args.evict_policy,
            "next_load_ms_p50": round(sched["next_load_ms_p50"], 5),
            "pop_ready_ms_p50": round(sched["pop_ready_ms_p50"], 5),
            "cache_only_turns_per_s_by_policy": {k: round(v, 1) for k, v in speed.items()
                                                 if k != "all"},
            "paper_ms": {"schedule": 0.62, "evict": 0.35},
        },
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"schedule decision p50: {out['schedule_decision_ms_p50']:.4f} ms (paper 0.62 ms)")
        print(f"evict decision p50:    {out['evict_decision_ms_p50']:.4f} ms (paper 0.35 ms)")
        print(f"cache-only replay:     {out['cache_only_turns_per_s']:.0f} turns/s "
              f"({', '.join(f'{k} {v:.0f}' for k, v in out['detail']['cache_only_turns_per_s_by_policy'].items())})")
    return 0
