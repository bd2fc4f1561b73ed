"""`bidaw bench compute`: decode throughput under batching, KV restore vs recompute, TTFT."""
from __future__ import annotations

import json


def register(sub, groups) -> None:
    p = groups["bench"].add_parser("compute", help="compute-side figures (CPU or GPU)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-replay", action="store_true",
                   help="skip the live bidaw-vs-fcfs replay (two deployments, a few minutes)")
    p.set_defaults(func=run)


def run(args) -> int:
    from bench.compute_bench import run as measure

    result = measure(replay=not args.no_replay)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:28s} {value}")
    return 0
