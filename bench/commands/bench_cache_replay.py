"""`bidaw bench cache-replay`: a live run's per-turn records through every DRAM eviction policy."""
from __future__ import annotations

import argparse
import json

from bench.commands.bench_live import SMOLLM2_KV_BYTES_PER_TOKEN
from services.runtime.arg_types import positive, positive_int

POLICIES = ("fifo", "lru", "queue-aware", "bidaw", "bidaw-size")


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    p = groups["bench"].add_parser(
        "cache-replay", help="replay a live run's per-turn records through the eviction policies",
        description="Reads the records of `bidaw replay --records` or `bidaw bench live "
        "--records-dir` and replays when each turn was sent and ended, with its KV size and "
        "answer length, through the KV store's own eviction policies over a DRAM tier of "
        "--dram-bytes. Prints each policy's DRAM hit rate and evictions next to the live "
        "store's: a large difference points at the store, not at the policy.")
    p.add_argument("--records", required=True, metavar="FILE.jsonl", help="per-turn records")
    p.add_argument("--dram-bytes", required=True,
                   help="the DRAM tier the live run had (e.g. 249MiB; `bench live` prints it)")
    p.add_argument("--time-scale", type=positive, default=1.0,
                   help="the run's time scale (the store's --policy-time-scale)")
    p.add_argument("--bytes-per-token", type=positive_int, default=SMOLLM2_KV_BYTES_PER_TOKEN,
                   help="stored KV bytes per token of the run's model")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma list")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from bench.replay.cache_replay import cache_events, live_hit_rate, replay_cache
    from bench.replay.records import ANSWERED, read_jsonl
    from kv_store.config import StoreConfig
    from kv_store.eviction.registry import NEEDS_FUTURE, POLICY_NAMES
    from kv_store.store import make_store_policy
    from services.runtime.config import parse_size

    try:
        dram = parse_size(args.dram_bytes)
    except ValueError as exc:
        raise SystemExit(f"--dram-bytes: {exc}") from None
    if dram <= 0:
        raise SystemExit("--dram-bytes must be positive")
    if args.time_scale <= 0:
        raise SystemExit("--time-scale must be positive")
    if args.bytes_per_token <= 0:
        raise SystemExit("--bytes-per-token must be positive")
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    bad = [n for n in names if n not in POLICY_NAMES or n in NEEDS_FUTURE]
    if bad or not names:
        usable = [n for n in POLICY_NAMES if n not in NEEDS_FUTURE]
        raise SystemExit(f"--policies: unknown or offline-only {bad}; known: {', '.join(usable)}")
    try:
        records = read_jsonl(args.records)
    except (OSError, ValueError, TypeError) as exc:
        raise SystemExit(f"--records: cannot read {args.records}: {exc}") from None
    events = cache_events(records, args.bytes_per_token)
    turns = sum(r.status == ANSWERED for r in records)
    results = {}
    for name in names:
        policy = make_store_policy(StoreConfig(eviction=name, dram_bytes=dram,
                                               policy_time_scale=args.time_scale))
        results[name] = replay_cache(events, policy, dram).to_dict()
    live = live_hit_rate(records)
    if args.json:
        print(json.dumps({"dram_bytes": dram, "turns": turns, "live_hit_rate": live,
                          "policies": results}, indent=2))
        return 0
    print(f"{turns} answered turns, DRAM {dram / 2**20:.0f} MiB")
    print(f"{'policy':<12} {'DRAM hit':>8} {'hits':>6} {'misses':>6} {'evictions':>9}")
    for name, r in results.items():
        print(f"{name:<12} {r['hit_rate']:>8.1%} {r['hits']:>6} {r['misses']:>6} "
              f"{r['evictions']:>9}")
    if live is not None:
        print(f"{'live store':<12} {live:>8.1%}")
    return 0
