"""`bidaw simulate`: cache-only replay (--cache-only) or the timed simulation (bench.sim.timed)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

CACHE_ONLY_POLICIES = "fifo,lru,queue-aware,bidaw,bidaw-size,belady"


def _add(parser: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """Add an option unless already defined (the two modes share some flags)."""
    if any(f in parser._option_string_actions for f in flags):  # noqa: SLF001 - argparse has no API
        return
    parser.add_argument(*flags, **kwargs)


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = sub.add_parser("simulate", help="replay a trace through the policies (cache-only or timed)",
                       description="Cache-only replay (--cache-only, the paper's analysis-script "
                       "methodology) or the timed discrete-event simulation.")
    _add(p, "--trace", help="trace file (default: a synthetic trace)")
    _add(p, "--format", default="auto", help="trace format: auto, bidaw, mooncake, sharegpt")
    _add(p, "--window", help="START:END seconds: count hits/latencies only for turns in [START, END)")
    _add(p, "--sample-users", type=float,
         help="keep users whose rank in ascending id order has rank %% 10 < round(10*F)")
    _add(p, "--no-end-oracle", action="store_true",
         help="keep a finished session's KV until evicted (no knowledge of conversation ends)")
    _add(p, "--json", action="store_true", help="print one JSON object")
    g = p.add_argument_group("cache-only replay")
    g.add_argument("--cache-only", action="store_true", help="accesses in trace order, no timing")
    g.add_argument("--policies", default=CACHE_ONLY_POLICIES, help="comma-separated eviction policies")
    g.add_argument("--dram-gib", default="200", help="DRAM capacity in GiB; a comma list sweeps it")
    g.add_argument("--kv-bytes-per-token", type=int, default=819200, help="OPT-13B: 800 KiB")
    g.add_argument("--max-kv-tokens", type=int, default=2048, help="KV size cap in tokens")
    g.add_argument("--watermark-gib", type=float, default=2.0,
                   help="after each access evict until this much DRAM is free")
    g.add_argument("--lookahead", type=int, default=30,
                   help="queued requests a policy may see (queue-aware never evicts them)")
    g.add_argument("--partial-users", choices=("auto", "drop", "keep"), default="auto",
                   help="users first seen mid-conversation: drop (the paper's scripts), keep (with "
                   "an estimated history), auto (keep only if no user starts in the trace)")
    g.add_argument("--kv-after-turn", action="store_true",
                   help="a turn's KV counts its own tokens, as the store holds it once saved (the "
                   "paper's scripts count previous rounds only, so a one-turn session holds nothing)")
    g.add_argument("--policy-arg", action="append", default=[], metavar="POLICY.KEY=VALUE",
                   help="constructor argument, e.g. bidaw.stale_quantile=0.99 (repeatable)")
    try:
        from bench.sim import timed as timed_sim
    except ModuleNotFoundError as exc:
        if exc.name != "bench.sim.timed":
            raise
        timed_sim = None
    if timed_sim is not None:
        timed_sim.add_arguments(p)
    _add(p, "--plot", metavar="DIR", help="write PNG plots here")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.cache_only:
        result = run_cache_only(args)
    else:
        try:
            from bench.sim import timed as timed_sim
        except ModuleNotFoundError as exc:
            if exc.name != "bench.sim.timed":
                raise
            print("bidaw simulate: the timed mode (bench/sim/timed.py) is not built yet; "
                  "use --cache-only", file=sys.stderr)
            return 2
        result = timed_sim.run(args)
    if args.json:
        print(json.dumps(result))
    else:
        _print_human(result)
    return 0


def run_cache_only(args: argparse.Namespace) -> dict:
    import time

    from bench.sim.cache import GIB, parse_window, prepare_accesses, replay
    from kv_store.eviction.registry import POLICY_NAMES, make_policy

    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICY_NAMES]
    if unknown:
        raise SystemExit(f"unknown policies {unknown}; known: {', '.join(POLICY_NAMES)}")
    capacities = [float(x) for x in str(args.dram_gib).split(",") if x.strip()]
    from bench.sim.timed import parse_policy_args

    try:
        kwargs = parse_policy_args(args.policy_arg or [])
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    turns = _load_turns(args)
    log = prepare_accesses(turns, args.kv_bytes_per_token, args.max_kv_tokens, args.sample_users,
                           args.partial_users, args.kv_after_turn)
    window = parse_window(args.window)
    end_oracle = not args.no_end_oracle
    runs = []
    replayed, seconds = 0, 0.0
    bar = _progress(len(capacities) * len(names))
    for cap in capacities:
        policies: dict[str, dict] = {}
        for name in names:
            policy = make_policy(name, int(cap * GIB), int(args.watermark_gib * GIB),
                                 **kwargs.get(name, {}))
            t0 = time.perf_counter()
            res = replay(log, policy, int(cap * GIB), int(args.watermark_gib * GIB), window,
                         end_oracle, args.lookahead)
            seconds += time.perf_counter() - t0
            replayed += res.accesses
            policies[name] = res.as_dict()
            bar.update(1)
        _add_gap_closed(policies)
        runs.append({"dram_gib": cap, "policies": policies})
    bar.close()
    result: dict[str, Any] = {"turns": len(log), "end_oracle": end_oracle,
                              "window": list(window) if window else None,
                              "turns_per_s": replayed / seconds if seconds > 0 else None}
    if len(runs) == 1:
        result["dram_gib"] = capacities[0]
        result["policies"] = runs[0]["policies"]
    else:
        result["runs"] = runs
    if args.plot:
        from bench.sim.cache_plots import plot_cache_only

        result["plots"] = plot_cache_only(runs, log, window, args.plot, capacities)
    return result


def _add_gap_closed(policies: dict[str, dict]) -> None:
    """Share of the gap between the best of FIFO/LRU/queue-aware and Belady each policy closes."""
    baselines = [policies[n]["hit_rate"] for n in ("fifo", "lru", "queue-aware") if n in policies]
    if not baselines or "belady" not in policies:
        return
    base, best = max(baselines), policies["belady"]["hit_rate"]
    for m in policies.values():
        m["gap_closed"] = (m["hit_rate"] - base) / (best - base) if best > base else None


def _load_turns(args: argparse.Namespace) -> list:
    from bench.traces import load_trace, synthesize

    if args.trace:
        return load_trace(args.trace, args.format)
    return synthesize()


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="policies", unit="run", disable=not sys.stderr.isatty(),
                file=sys.stderr)


def _print_human(result: dict) -> None:
    if "systems" in result:
        for name, m in result["systems"].items():
            inner = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                              for k, v in m.items())
            print(f"{name:16s} {inner}")
        return
    runs = result.get("runs") or [{"dram_gib": result["dram_gib"], "policies": result["policies"]}]
    print(f"turns={result['turns']} end_oracle={result['end_oracle']} window={result['window']}")
    for run in runs:
        print(f"DRAM {run['dram_gib']:g} GiB")
        for name, m in run["policies"].items():
            gap = m.get("gap_closed")
            gap_text = f"  gap_closed={100 * gap:6.1f}%" if gap is not None else ""
            print(f"  {name:12s} hit_rate={100 * m['hit_rate']:5.1f}%  "
                  f"byte_hit_rate={100 * m['byte_hit_rate']:5.1f}%  "
                  f"all_turns={100 * m['turn_hit_rate']:5.1f}%  hits={m['hits']} "
                  f"misses={m['misses']}{gap_text}")
    for path in result.get("plots", []):
        print(f"wrote {path}")
