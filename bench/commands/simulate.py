"""`bidaw simulate`: cache-only replay (--cache-only) or the timed simulation (bench.sim)."""
from __future__ import annotations

import argparse
import json
from typing import Any, Iterable

from bench.commands import simulate_cache, simulate_timed
from bench.traces.loaders import FORMATS
from bench.traces.turn import Turn
from bench.traces.window import parse_window
from services.runtime.arg_types import non_negative, share, unit_fraction


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = sub.add_parser("simulate", help="replay a trace through the policies (cache-only or timed)",
                       description="Cache-only replay (--cache-only, the paper's analysis-script "
                       "methodology) or the timed discrete-event simulation.")
    p.add_argument("--trace", help="trace file (default: a synthetic trace)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="trace format")
    p.add_argument("--window", help="START:END seconds: count hits/latencies only for turns in "
                   "[START, END) (either side may be empty; earlier turns warm the caches)")
    p.add_argument("--sample-users", type=share,
                   help="keep users whose rank in ascending id order has rank %% 10 < round(10*F)")
    p.add_argument("--no-end-oracle", action="store_true",
                   help="keep a finished session's KV until evicted (no knowledge of conversation "
                   "ends)")
    p.add_argument("--policy-arg", action="append", default=[], metavar="POLICY.KEY=VALUE",
                   help="constructor argument, e.g. bidaw.stale_quantile=0.99 (repeatable)")
    p.add_argument("--plot", metavar="DIR", help="write PNG plots here (cache-only: hit rates; "
                   "timed: latency CDF and queueing)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--prepare-lead-s", type=non_negative, metavar="R",
                   help="a client says each turn is coming R real seconds before it arrives "
                   "(POST /v1/sessions/{id}/prepare when its user starts typing; never before "
                   "the previous turn), and the store reads its KV into DRAM (cache-only: with "
                   "--ssd-gbps)")
    p.add_argument("--prepare-share", type=unit_fraction, default=None, metavar="F",
                   help="with --prepare-lead-s: the share of users whose clients do (0-1)")
    simulate_cache.add_arguments(p.add_argument_group("cache-only replay"))
    simulate_timed.add_arguments(p.add_argument_group("timed simulation"))
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.replay.args import check_prepare_share

    check_prepare_share(args, "simulate")
    try:
        window = parse_window(args.window)
        policy_kwargs = parse_policy_args(args.policy_arg)
        check_policy_args(policy_kwargs)
    except ValueError as exc:
        raise SystemExit(f"bidaw simulate: {exc}") from None
    turns = load_turns(args.trace, args.format)
    mode = simulate_cache if args.cache_only else simulate_timed
    result = mode.run(args, turns, window, policy_kwargs)
    if args.json:
        print(json.dumps(result))
    else:
        mode.print_human(result)
    return 0


def load_turns(trace: str | None, fmt: str = "auto") -> list[Turn]:
    """The trace file's turns, or the seeded synthetic trace without one."""
    from bench.traces import load_trace, synthesize

    return load_trace(trace, fmt or "auto") if trace else synthesize()


def check_policy_args(policy_kwargs: dict[str, dict[str, Any]]) -> None:
    """ValueError naming the --policy-arg a policy does not take (or refuses), before any run."""
    from kv_store.eviction.policy_args import checked_args
    from kv_store.eviction.registry import make_policy, policy_class

    for name, kwargs in policy_kwargs.items():
        try:
            kwargs.update(checked_args(policy_class(name), kwargs))
            make_policy(name, **kwargs)
        except (TypeError, ValueError) as exc:
            given = " ".join(f"{name}.{k}={v}" for k, v in kwargs.items())
            raise ValueError(f"--policy-arg {given}: {exc}") from None


def parse_policy_args(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`--policy-arg POLICY.KEY=VALUE` items as constructor kwargs per policy."""
    import yaml

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        name_key, sep, value = item.partition("=")
        policy, dot, key = name_key.rpartition(".")
        if not sep or not dot:
            raise ValueError(f"--policy-arg wants POLICY.KEY=VALUE, got {item!r}")
        try:
            parsed = yaml.safe_load(value)
        except (yaml.YAMLError, RecursionError):
            raise ValueError(f"--policy-arg {name_key}: the value is not a YAML scalar or "
                             "list") from None
        out.setdefault(policy, {})[key.replace("-", "_")] = parsed
    return out
