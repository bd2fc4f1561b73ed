"""`bidaw trace stats FILE`, `bidaw trace synth`, `bidaw trace transform FILE`: look at a trace,
make one, or derive one."""
from __future__ import annotations

import argparse
import json
import sys

from bench.traces.loaders import FORMATS
from services.runtime.arg_types import (fraction, positive, positive_int, rounds_mean,
                                        unit_fraction)



def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = sub.add_parser("trace", help="statistics of a trace; synthetic trace generation")
    tsub = p.add_subparsers(dest="trace_command", required=True, metavar="ACTION")

    st = tsub.add_parser("stats", help="users, turns, rounds, lengths, gaps, answer/gap correlation")
    st.add_argument("file", help="trace file")
    st.add_argument("--format", default="auto", choices=FORMATS, help="trace format")
    st.add_argument("--json", action="store_true", help="print one JSON object")
    st.set_defaults(func=_stats)

    sy = tsub.add_parser("synth", help="write a seeded synthetic trace (the paper's format)")
    sy.add_argument("--out", required=True, help="output file ('-' for stdout)")
    sy.add_argument("--users", type=positive_int, default=4486,
                    help="sessions (default: part 1's 4486)")
    sy.add_argument("--users-per-min", type=positive, default=14.1, help="new sessions a minute")
    sy.add_argument("--rounds-mean", type=rounds_mean, default=23.0,
                    help="mean turns per session (at most 10,000)")
    sy.add_argument("--seed", type=int, default=0)
    sy.add_argument("--json", action="store_true", help="print the trace's statistics as JSON")
    sy.set_defaults(func=_synth)

    tr = tsub.add_parser("transform", help="derive a trace: mix in one-shot sessions, shuffle "
                         "answer lengths, make users machine-paced (seeded; applied in that order)")
    tr.add_argument("file", help="trace file")
    tr.add_argument("--format", default="auto", choices=FORMATS, help="trace format")
    tr.add_argument("--out", required=True, help="output file, the paper's format ('-' for stdout)")
    tr.add_argument("--add-one-shot", type=fraction, metavar="F",
                    help="add single-turn sessions that never return until they are a fraction F "
                    "of all turns (0 <= F < 1); sizes from the trace's first turns")
    tr.add_argument("--shuffle-answers", action="store_true",
                    help="permute answer lengths across all turns: the answer/think-time signal "
                    "destroyed, arrivals and query lengths kept")
    tr.add_argument("--machine-paced", type=unit_fraction, metavar="F",
                    help="a fraction F of users (0 <= F <= 1) send each next turn 1 s after the "
                    "previous one, whatever the answer")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--json", action="store_true", help="print the trace's statistics as JSON")
    tr.set_defaults(func=_transform)


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


def _write(turns: list, out: str, as_json: bool) -> None:
    from bench.traces.bidaw_format import write_bidaw
    from bench.traces.stats import trace_stats

    write_bidaw(turns, "/dev/stdout" if out == "-" else out)
    if out != "-":
        _print_stats(trace_stats(turns), as_json)
    elif as_json:
        print(json.dumps(trace_stats(turns)), file=sys.stderr)


def _transform(args: argparse.Namespace) -> int:
    from bench.traces import load_trace
    from bench.traces.no_signal import machine_paced, shuffle_answers
    from bench.traces.one_shot import add_one_shot

    if args.add_one_shot is None and not args.shuffle_answers and args.machine_paced is None:
        print("bidaw trace transform: give --add-one-shot F, --shuffle-answers or "
              "--machine-paced F", file=sys.stderr)
        return 2
    turns = load_trace(args.file, args.format)
    if args.add_one_shot is not None:
        turns = add_one_shot(turns, args.add_one_shot, args.seed)
    if args.shuffle_answers:
        turns = shuffle_answers(turns, args.seed)
    if args.machine_paced is not None:
        turns = machine_paced(turns, args.machine_paced, args.seed)
    _write(turns, args.out, args.json)
    return 0


def _synth(args: argparse.Namespace) -> int:
    from bench.traces import SynthConfig, synthesize

    cfg = SynthConfig(users=args.users, users_per_min=args.users_per_min,
                      rounds_mean=args.rounds_mean, seed=args.seed)
    _write(synthesize(cfg), args.out, args.json)
    return 0
