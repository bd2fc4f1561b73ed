"""`bidaw bench compute`: prefill and decode per dtype against the memory roofline, a decode
step's profile, KV restore vs recompute, TTFT."""
from __future__ import annotations

import json


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "compute", help="compute-side figures (CPU or GPU)",
        description="Engine figures of SmolLM2-135M (dense float32 and bfloat16, int8 and int4 "
        "weights) against the memory roofline and llama.cpp's quoted figures, KV restore vs "
        "recompute and TTFT, in a few minutes. The scheduler's queueing gain is `bidaw bench "
        "live`'s.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from bench.compute_bench import run as measure

    result = measure()
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:30s} {value}")
    return 0
