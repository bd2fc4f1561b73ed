"""`bidaw simulate` without --cache-only: the timed simulation, systems side by side.

`bench/commands/simulate.py` owns the command; it calls `add_arguments(parser)` and, for the timed
mode, `run(args) -> dict` and prints `{"systems": {name: metrics}, ...}`. `simulate(...)` is the
same thing for Python callers (tests, sweeps). Every system replays the same workload with fresh
policy objects; metrics count the turns whose trace time is inside --window.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable, Iterable

from bench.sim.cost_profile import CostModel, load_profile, profile_names
from bench.sim.metrics import TurnLog
from bench.sim.systems import DEFAULT_SYSTEMS, system_spec
from bench.sim.workload import CLOSED, OPEN, Workload, build_workload
from bench.traces.turn import Turn

DEFAULT_PROFILE = "opt13b-a800"


def _add(parser: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """Add an option unless the cache-only side already defined it (shared flags)."""
    if any(f in parser._option_string_actions for f in flags):  # noqa: SLF001 - argparse has no API
        return
    parser.add_argument(*flags, **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The timed-mode flags (and the shared ones, if the caller has not added them)."""
    _add(parser, "--trace", help="trace file (default: a synthetic trace)")
    _add(parser, "--format", default="auto", help="trace format (bidaw, mooncake, sharegpt, auto)")
    _add(parser, "--window", help="START:END trace seconds whose turns are measured (earlier turns "
         "warm the caches)")
    _add(parser, "--sample-users", type=float, help="keep users whose rank %% 10 < round(10*F)")
    _add(parser, "--no-end-oracle", action="store_true",
         help="keep a finished session's KV until evicted (no knowledge of conversation ends)")
    _add(parser, "--json", action="store_true", help="print one JSON object")
    g = parser.add_argument_group("timed simulation")
    g.add_argument("--profile", default=DEFAULT_PROFILE,
                   help=f"cost profile name or YAML path ({', '.join(profile_names())})")
    g.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help="comma-separated: recompute, fcfs-lru, cachedattention, bidaw, bidaw-size, "
                   "ideal, ideal-kv; bidaw ablations by suffix -no-io, -no-answer, -no-tensor6")
    g.add_argument("--time-scale", type=float, default=1.0,
                   help="replay X times faster: first arrivals and think times divided by X")
    g.add_argument("--arrivals", choices=(CLOSED, OPEN), default=CLOSED,
                   help="closed: next turn = previous answer + the trace's gap; open: at its trace "
                   "time, never before the previous answer")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile field, e.g. --set host.dram_gib=120 (repeatable)")
    g.add_argument("--tail", type=float, default=600.0,
                   help="seconds of trace after the window replayed as background load")
    g.add_argument("--sweep", action="store_true",
                   help="find each system's sustainable load (users/min) at --latency-target")
    g.add_argument("--latency-target", type=float, default=5.0, help="seconds (for --sweep)")
    g.add_argument("--sweep-metric", default="latency_p90",
                   help="metric held under the target (for --sweep)")
    g.add_argument("--plot", metavar="DIR", help="write latency CDF and queueing PNGs here")


def parse_window(text: str | None) -> tuple[float, float] | None:
    if not text:
        return None
    lo, _, hi = text.partition(":")
    return (float(lo) if lo else float("-inf"), float(hi) if hi else float("inf"))


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set wants KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_policy_args(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`--policy-arg POLICY.KEY=VALUE` (shared with the cache-only mode) as constructor kwargs."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name_key, sep, value = item.partition("=")
        policy, dot, key = name_key.rpartition(".")
        if not sep or not dot:
            raise ValueError(f"--policy-arg wants POLICY.KEY=VALUE, got {item!r}")
        out.setdefault(policy, {})[key.replace("-", "_")] = yaml.safe_load(value)
    return out


def simulate_system(workload: Workload, cost: CostModel, name: str, end_oracle: bool = True,
                    progress: Callable[[int], None] | None = None, **kwargs: Any) -> TurnLog:
    from bench.sim.engine import TimedSimulation

    return TimedSimulation(workload, cost, system_spec(name), end_oracle=end_oracle,
                           progress=progress, **kwargs).run()


def simulate(turns: list[Turn], systems: Iterable[str] = DEFAULT_SYSTEMS,
             profile: str | CostModel = DEFAULT_PROFILE, window: tuple[float, float] | None = None,
             sample_users: float | None = None, time_scale: float = 1.0,
             arrival_mode: str = CLOSED, end_oracle: bool = True, tail_s: float = 600.0,
             show_progress: bool = False, logs: dict[str, TurnLog] | None = None,
             **kwargs: Any) -> dict[str, dict]:
    """Metrics per system, in order. `logs`, if given, receives each system's per-turn log."""
    cost = profile if isinstance(profile, CostModel) else load_profile(profile)
    workload = build_workload(turns, window, sample_users, time_scale, arrival_mode, tail_s)
    out: dict[str, dict] = {}
    for name in systems:
        system_spec(name)  # fail on a bad name before any long run
    for name in systems:
        started = time.perf_counter()
        with _progress_bar(show_progress, workload.measured_count, name) as bar:
            log = simulate_system(workload, cost, name, end_oracle,
                                  progress=bar.update if bar is not None else None, **kwargs)
        out[name] = log.summary()
        out[name]["wall_s"] = round(time.perf_counter() - started, 2)
        if logs is not None:
            logs[name] = log
    return out


class _NoBar:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _progress_bar(show: bool, total: int, name: str):
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{name:>16}", unit="turn", file=sys.stderr, leave=False,
                mininterval=0.5, disable=None)


def _load_turns(args: argparse.Namespace) -> list[Turn]:
    if getattr(args, "trace", None):
        from bench.traces import load_trace

        return load_trace(args.trace, getattr(args, "format", "auto") or "auto")
    from bench.traces import synthesize

    return synthesize()


def run(args: argparse.Namespace) -> dict:
    """The timed mode of `bidaw simulate`: a JSON-ready dict with "systems" (and "sweep")."""
    turns = _load_turns(args)
    cost = load_profile(args.profile, parse_overrides(args.set))
    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    window = parse_window(getattr(args, "window", None))
    end_oracle = not getattr(args, "no_end_oracle", False)
    sample = getattr(args, "sample_users", None)
    common = dict(window=window, sample_users=sample, arrival_mode=args.arrivals,
                  end_oracle=end_oracle, tail_s=args.tail,
                  policy_kwargs=parse_policy_args(getattr(args, "policy_arg", None) or []))
    workload = build_workload(turns, window, sample, args.time_scale, args.arrivals, args.tail)
    logs: dict[str, TurnLog] = {}
    result: dict[str, Any] = {
        "profile": cost.name,
        "tensor": cost.tensors.tensor,
        "time_scale": args.time_scale,
        "end_oracle": end_oracle,
        "measured_turns": workload.measured_count,
        "users_per_min": round(workload.new_users_per_min(), 3),
        "systems": simulate(turns, names, cost, time_scale=args.time_scale,
                            show_progress=sys.stderr.isatty(), logs=logs, **common),
    }
    if args.sweep:
        from bench.sim.sweep import sweep

        result["sweep"] = sweep(turns, names, cost, args.latency_target, args.sweep_metric,
                                start_scale=args.time_scale, **common)
    if args.plot:
        from bench.sim.plots import plot_timed

        result["plots"] = plot_timed(logs, args.plot)
    return result
