"""`bidaw simulate --cache-only`: every policy over every DRAM size, accesses in trace order."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.sim.cache import GIB, prepare_accesses, replay
from bench.sim.cache_bandwidth import replay_bandwidth
from bench.traces.turn import Turn
from kv_store.eviction.registry import NEEDS_SSD_TIME, POLICY_NAMES, make_policy
from services.runtime.arg_types import non_negative, non_negative_int, positive_int, positive_list

CACHE_ONLY_POLICIES = "fifo,lru,queue-aware,bidaw,bidaw-size,belady"


def add_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--cache-only", action="store_true", help="accesses in trace order, no timing")
    g.add_argument("--policies", default=CACHE_ONLY_POLICIES, help="comma-separated eviction policies")
    g.add_argument("--dram-gib", type=positive_list, default="200", help="DRAM capacity in GiB; a comma list sweeps it")
    g.add_argument("--kv-bytes-per-token", type=positive_int, default=819200, help="OPT-13B: 800 KiB")
    g.add_argument("--max-kv-tokens", type=positive_int, default=2048, help="KV size cap in tokens")
    g.add_argument("--watermark-gib", type=non_negative, default=2.0,
                   help="after each access evict until this much DRAM is free")
    g.add_argument("--lookahead", type=non_negative_int, default=30,
                   help="queued requests a policy may see (queue-aware never evicts them)")
    g.add_argument("--partial-users", choices=("auto", "drop", "keep"), default="auto",
                   help="users first seen mid-conversation: drop (the paper's scripts), keep (with "
                   "an estimated history), auto (keep only if no user starts in the trace)")
    g.add_argument("--kv-after-turn", action="store_true",
                   help="a turn's KV counts its own tokens, as the store holds it once saved (the "
                   "paper's scripts count previous rounds only, so a one-turn session holds nothing)")
    g.add_argument("--ssd-gbps", type=positive_list,
                   help="model SSD reads at this many GB/s (10^9 B/s; a comma list sweeps it), at "
                   "the trace's pace divided by --time-scale: a hit counts only if the KV is in "
                   "DRAM when the turn arrives; enables policy bidaw-prefetch")
    g.add_argument("--end-known-after", type=non_negative, default=0.0, metavar="S",
                   help="with --ssd-gbps: the end oracle announces each conversation's end S "
                   "seconds of trace time after its last turn (default 0: at it), a bound on how "
                   "early a policy would need to know ends")


def run(args: argparse.Namespace, turns: list[Turn], window: tuple[float, float] | None,
        policy_kwargs: dict[str, dict]) -> dict:
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    ssds = getattr(args, "ssd_gbps", None) or []
    ssd = ssds[0] if ssds else None
    known = POLICY_NAMES + (tuple(sorted(NEEDS_SSD_TIME)) if ssd is not None else ())
    unknown = [n for n in names if n not in known]
    if unknown:
        hint = (f" ({', '.join(sorted(NEEDS_SSD_TIME & set(unknown)))} needs --ssd-gbps)"
                if NEEDS_SSD_TIME & set(unknown) else "")
        raise SystemExit(f"unknown policies {unknown}; known: {', '.join(known)}{hint}")
    scale = getattr(args, "time_scale", 1.0)
    capacities = args.dram_gib
    if args.watermark_gib >= min(capacities):
        raise SystemExit(f"bidaw simulate: --watermark-gib {args.watermark_gib:g} must be below "
                         f"--dram-gib (smallest {min(capacities):g})")
    log = prepare_accesses(turns, args.kv_bytes_per_token, args.max_kv_tokens, args.sample_users,
                           args.partial_users, args.kv_after_turn)
    end_oracle = not args.no_end_oracle
    end_delay = getattr(args, "end_known_after", 0.0)
    if end_delay and (ssd is None or not end_oracle):
        raise SystemExit("bidaw simulate: --end-known-after needs --ssd-gbps and the end oracle "
                         "(not --no-end-oracle)")
    lead, share = getattr(args, "prepare_lead_s", None), getattr(args, "prepare_share", 1.0)
    if lead is not None and ssd is None:
        raise SystemExit("bidaw simulate: --prepare-lead-s needs --ssd-gbps (a read must take time "
                         "for a prepare to matter)")
    watermark = int(args.watermark_gib * GIB)
    runs = []
    replayed, seconds = 0, 0.0
    bar = _progress(len(capacities) * len(names) * max(len(ssds), 1))
    for ssd, cap in [(g, c) for g in (ssds or [None]) for c in capacities]:
        policies: dict[str, dict] = {}
        for name in names:
            kwargs = policy_kwargs.get(name, {})
            t0 = time.perf_counter()
            policy = make_policy(name, int(cap * GIB), watermark, **kwargs)
            if ssd is None:
                res = replay(log, policy, int(cap * GIB), watermark, window, end_oracle,
                             args.lookahead)
            else:
                res = replay_bandwidth(log, policy, int(cap * GIB), ssd, scale, watermark, window,
                                       end_oracle, args.lookahead, end_delay, lead, share)
            seconds += time.perf_counter() - t0
            replayed += res.accesses
            policies[name] = res.as_dict()
            bar.update(1)
        _add_gap_closed(policies)
        _add_speculative_per_saved(policies)
        runs.append({"dram_gib": cap, **({"ssd_gbps": ssd} if ssd is not None else {}),
                     "policies": policies})
    bar.close()
    result: dict[str, Any] = {"turns": len(log), "end_oracle": end_oracle,
                              **({"end_known_after_s": end_delay} if end_delay else {}),
                              **({"prepare_lead_s": lead, "prepare_share": share}
                                 if lead is not None else {}),
                              **({"time_scale": scale} if ssds else {}),
                              "window": list(window) if window else None,
                              "turns_per_s": replayed / seconds if seconds > 0 else None}
    if len(runs) == 1:
        result.update(runs[0])
    else:
        result["runs"] = runs
    if args.plot:
        from bench.sim.cache_plots import plot_cache_only

        result["plots"] = plot_cache_only(runs, log, window, args.plot, capacities)
        if len(ssds) > 1:
            from bench.sim.cache_plots import plot_hit_rate_vs_ssd

            result["plots"].append(plot_hit_rate_vs_ssd(runs, args.plot, scale))
    return result


def _add_gap_closed(policies: dict[str, dict]) -> None:
    """Share of the gap between the best of FIFO/LRU/queue-aware and Belady each policy closes."""
    baselines = [policies[n]["hit_rate"] for n in ("fifo", "lru", "queue-aware") if n in policies]
    if not baselines or "belady" not in policies:
        return
    base, best = max(baselines), policies["belady"]["hit_rate"]
    for m in policies.values():
        m["gap_closed"] = (m["hit_rate"] - base) / (best - base) if best > base else None


def _add_speculative_per_saved(policies: dict[str, dict]) -> None:
    """Issue 18's byte figure, for each policy that promotes on a guess: its speculative bytes
    over the demand bytes they saved against bidaw-size (no promotion, the same ranking) in
    the same run; None where nothing was saved."""
    base = policies.get("bidaw-size", {}).get("demand_read_bytes")
    if base is None:
        return
    for name, m in policies.items():
        if name != "bidaw-size" and m.get("speculative_read_bytes"):
            saved = base - m["demand_read_bytes"]
            m["demand_bytes_saved"] = saved
            m["speculative_per_saved_byte"] = m["speculative_read_bytes"] / saved if saved > 0 \
                else None


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="policies", unit="run", disable=not sys.stderr.isatty(),
                file=sys.stderr)


def _ssd_text(m: dict) -> str:
    if "ssd_read_bytes" not in m:
        return ""
    ratio = m.get("speculative_per_saved_byte")
    return (f"  ssd_read={m['ssd_read_bytes'] / 1e9:.1f}GB "
            f"speculative={m['speculative_read_bytes'] / 1e9:.1f}GB"
            + (f" ({ratio:.2f}x the demand bytes saved)" if ratio is not None else ""))


def print_human(result: dict) -> None:
    runs = result.get("runs") or [result]
    print(f"turns={result['turns']} end_oracle={result['end_oracle']} window={result['window']}")
    for run in runs:
        ssd = f", SSD {run['ssd_gbps']:g} GB/s at x{result['time_scale']:g}" if "ssd_gbps" in run else ""
        print(f"DRAM {run['dram_gib']:g} GiB{ssd}")
        for name, m in run["policies"].items():
            gap = m.get("gap_closed")
            gap_text = f"  gap_closed={100 * gap:6.1f}%" if gap is not None else ""
            print(f"  {name:14s} hit_rate={100 * m['hit_rate']:5.1f}%  "
                  f"byte_hit_rate={100 * m['byte_hit_rate']:5.1f}%  "
                  f"all_turns={100 * m['turn_hit_rate']:5.1f}%  hits={m['hits']} "
                  f"misses={m['misses']}{gap_text}{_ssd_text(m)}")
    for path in result.get("plots", []):
        print(f"wrote {path}")
