"""`bidaw trace stats FILE` and `bidaw trace synth`: look at a trace, or make one."""
from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = sub.add_parser("trace", help="statistics of a trace; synthetic trace generation")
    tsub = p.add_subparsers(dest="trace_command", required=True, metavar="ACTION")

    st = tsub.add_parser("stats", help="users, turns, rounds, lengths, gaps, answer/gap correlation")
    st.add_argument("file", help="trace file")
    st.add_argument("--format", default="auto", help="auto, bidaw, mooncake or sharegpt")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.set_defaults(func=_stats)

    sy = tsub.add_parser("synth", help="write a seeded synthetic trace (the paper's format)")
    sy.add_argument("--out", required=True, help="output file ('-' for stdout)")
    sy.add_argument("--users", type=int, default=4486, help="sessions (default: part 1's 4486)")
    sy.add_argument("--users-per-min", type=float, default=14.1, help="new sessions a minute")
    sy.add_argument("--rounds-mean", type=float, default=23.0, help="mean turns per session")
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--json", action="store_true", help="print the trace's statistics as JSON")
    sy.set_defaults(func=_synth)


def _print_stats(stats: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(stats))
        return
    for key, value in stats.items():
        if isinstance(value, dict):
            inner = "  ".join(f"{k}={v:.4g}" for k, v in value.items())
            print(f"{key:22s} {inner}")
        elif isinstance(value, float):
            print(f"{key:22s} {value:.4g}")
        else:
            print(f"{key:22s} {value}")


def _stats(args: argparse.Namespace) -> int:
    from bench.traces import load_trace
    from bench.traces.stats import trace_stats

    _print_stats(trace_stats(load_trace(args.file, args.format)), args.json)
    return 0


def _synth(args: argparse.Namespace) -> int:
    from bench.traces import SynthConfig, synthesize
    from bench.traces.bidaw_format import write_bidaw
    from bench.traces.stats import trace_stats

    cfg = SynthConfig(users=args.users, users_per_min=args.users_per_min,
                      rounds_mean=args.rounds_mean, seed=args.seed)
    turns = synthesize(cfg)
    write_bidaw(turns, "/dev/stdout" if args.out == "-" else args.out)
    if args.out != "-":
        _print_stats(trace_stats(turns), args.json)
    elif args.json:
        print(json.dumps(trace_stats(turns)), file=sys.stderr)
    return 0
