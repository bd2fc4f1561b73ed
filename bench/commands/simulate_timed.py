"""`bidaw simulate` without --cache-only: the timed simulation, systems side by side, and
optionally each system's sustainable load (--sweep)."""
from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

from bench.sim.cost_profile import load_profile, profile_names
from bench.sim.metrics import TurnLog
from bench.sim.sweep import sweep
from bench.sim.systems import DEFAULT_SYSTEMS, system_spec
from bench.sim.timed import DEFAULT_PROFILE, simulate
from bench.sim.workload import CLOSED, OPEN, build_workload
from bench.traces.turn import Turn
from services.runtime.arg_types import non_negative, positive


def add_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"cost profile name or YAML path ({', '.join(profile_names())})")
    g.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help="comma-separated: recompute, fcfs-lru, cachedattention, bidaw, bidaw-size, "
                   "bidaw-restore, bidaw-restore-stall (load or recompute per turn), bidaw-prefetch, "
                   "ideal, ideal-kv; bidaw ablations by suffix -no-io, -no-answer, -no-tensor6, "
                   "-prefix-only, -no-piggyback")
    g.add_argument("--time-scale", type=positive, default=1.0,
                   help="replay X times faster: first arrivals and think times divided by X")
    g.add_argument("--arrivals", choices=(CLOSED, OPEN), default=CLOSED,
                   help="closed: next turn = previous answer + the trace's gap; open: at its trace "
                   "time, never before the previous answer")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile field, e.g. --set host.dram_gib=120 (repeatable)")
    g.add_argument("--tail", type=non_negative, default=600.0,
                   help="seconds of trace after the window replayed as background load")
    g.add_argument("--sweep", action="store_true",
                   help="find each system's sustainable load (users/min) at --latency-target")
    g.add_argument("--latency-target", type=positive, default=5.0, help="seconds (for --sweep)")
    g.add_argument("--sweep-metric", default="latency_p90",
                   help="metric held under the target (for --sweep)")


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def run(args: argparse.Namespace, turns: list[Turn], window: tuple[float, float] | None,
        policy_kwargs: dict[str, dict]) -> dict:
    """A JSON-ready dict with "systems" (and "sweep", "plots")."""
    try:
        overrides = parse_overrides(args.set)
        cost = load_profile(args.profile, overrides)
    except ValueError as exc:
        raise SystemExit(f"bidaw simulate: --set {exc}") from None
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    try:
        for name in names:
            system_spec(name)
    except ValueError as exc:
        raise SystemExit(f"bidaw simulate: --systems: {exc}") from None
    end_oracle = not args.no_end_oracle
    lead, share = args.prepare_lead_s, args.prepare_share  # clients that say a turn is coming
    common = dict(window=window, sample_users=args.sample_users, arrival_mode=args.arrivals,
                  end_oracle=end_oracle, tail_s=args.tail, policy_kwargs=policy_kwargs,
                  prepare_lead_s=lead, prepare_share=share)
    workload = build_workload(turns, window, args.sample_users, args.time_scale, args.arrivals,
                              args.tail)
    logs: dict[str, TurnLog] = {}
    result: dict[str, Any] = {
        "profile": cost.name,
        "tensor": cost.tensors.tensor,
        "time_scale": args.time_scale,
        "end_oracle": end_oracle,
        **({"prepare_lead_s": lead, "prepare_share": share} if lead is not None else {}),
        "measured_turns": workload.measured_count,
        "users_per_min": round(workload.new_users_per_min(), 3),
        "systems": simulate(turns, names, cost, time_scale=args.time_scale,
                            show_progress=sys.stderr.isatty(), logs=logs, **common),
    }
    if args.sweep:
        result["sweep"] = sweep(turns, names, cost, args.latency_target, args.sweep_metric,
                                start_scale=args.time_scale, **common)
    if args.plot:
        from bench.sim.plots import plot_sustainable_load, plot_timed

        result["plots"] = plot_timed(logs, args.plot)
        if args.sweep:
            title = (f"{cost.name}, DRAM {cost.dram_bytes / 2**30:g} GiB, "
                     f"{args.sweep_metric} <= {args.latency_target:g} s"
                     f"{'' if end_oracle else ', no end oracle'}")
            result["plots"].append(plot_sustainable_load(result["sweep"], args.plot, title))
    return result


def print_human(result: dict) -> None:
    for name, m in result["systems"].items():
        inner = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in m.items())
        print(f"{name:16s} {inner}")
