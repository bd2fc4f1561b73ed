"""Flags shared by `bidaw replay` and `bidaw bench live`: which turns, which users, how fast."""
from __future__ import annotations

import argparse

from bench.replay.plan import PlanConfig
from bench.replay.source import FORMATS
from bench.traces.window import parse_window
from services.runtime.arg_types import non_negative, unit_fraction


def add_plan_args(p: argparse.ArgumentParser, *, users: int, time_scale: float, max_rounds: int,
                  max_context: int, trace_required: bool = False) -> None:
    p.add_argument("--trace", required=trace_required, help="trace file")
    p.add_argument("--format", default="auto", choices=FORMATS,
                   help="trace format (synthetic: the seeded generator, no file)")
    p.add_argument("--window", help="START:END in trace seconds (default: the busiest window)")
    p.add_argument("--window-s", type=float, default=3600.0,
                   help="length of the busiest window (default: an hour)")
    p.add_argument("--users", type=int, default=users, help="users sampled from the window "
                   f"(0: all; default {users})")
    p.add_argument("--max-rounds", type=int, default=max_rounds,
                   help=f"turns replayed per user (0: all in the window; default {max_rounds})")
    p.add_argument("--time-scale", type=float, default=time_scale,
                   help=f"replay seconds per trace second (default {time_scale})")
    p.add_argument("--max-context", type=int, default=max_context,
                   help="most tokens of one conversation; longer ones start a new session "
                   f"(default {max_context})")
    p.add_argument("--max-answer", type=int, default=0,
                   help="cap on answer tokens (0: the trace's, within the context)")
    p.add_argument("--token-range", default="100:32000",
                   help="query token ids are drawn from LO:HI (no special tokens)")
    p.add_argument("--seed", type=int, default=0, help="user sampling and query tokens")


def add_client_signal_args(p: argparse.ArgumentParser) -> None:
    """What the replayed clients tell the deployment besides their turns (default: nothing)."""
    p.add_argument("--end-sessions-after", type=non_negative, default=None, metavar="S",
                   help="each user ends its sessions S replay seconds after its last answer "
                   "(as DELETE /v1/sessions does; default: never, the store must guess)")
    p.add_argument("--prepare-lead-s", type=non_negative, default=None, metavar="R",
                   help="each user's client says a continuing turn is coming R replay seconds "
                   "before sending it, never before the previous answer's end (as POST "
                   "/v1/sessions/{id}/prepare does when its user starts typing; default: never)")
    p.add_argument("--prepare-share", type=unit_fraction, default=None, metavar="F",
                   help="with --prepare-lead-s: the share of users whose clients do (0-1, drawn "
                   "by user id as the simulator does; default 1)")


def check_prepare_share(args: argparse.Namespace, command: str) -> None:
    """--prepare-share means something only beside --prepare-lead-s; its default is 1."""
    if args.prepare_share is not None and args.prepare_lead_s is None:
        raise SystemExit(f"bidaw {command}: --prepare-share needs --prepare-lead-s (it is the "
                         "share of users whose clients prepare)")
    if args.prepare_share is None:
        args.prepare_share = 1.0


def plan_config(args: argparse.Namespace) -> PlanConfig:
    lo, hi = (int(x) for x in args.token_range.split(":"))
    try:
        window = parse_window(args.window)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    return PlanConfig(window=window,
                      window_s=args.window_s, users=args.users, max_rounds=args.max_rounds,
                      time_scale=args.time_scale, max_context=args.max_context,
                      max_answer=args.max_answer, token_range=(lo, hi), seed=args.seed)


def describe(plan) -> str:
    w0, w1 = plan.window
    return (f"window {w0:.0f}-{w1:.0f} s of the trace ({plan.users_in_window} users, "
            f"{plan.turns_in_window} turns); replaying {len(plan.users)} users, {plan.turns} "
            f"turns, {plan.answer_tokens} answer tokens, time x{plan.config.time_scale:g} "
            f"(scripted span {plan.span_s():.0f} s)")
