"""`bidaw bench compute`: prefill and decode per dtype against the memory roofline, a decode
step's profile, KV restore vs recompute, TTFT."""
from __future__ import annotations

import json


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "compute", help="compute-side figures (CPU or GPU)",
        description="Engine figures of SmolLM2-135M (dense float32 and bfloat16, bf16, int8, "
        "int4 and q4 weights) against the memory roofline and llama.cpp's (measured with "
        "--llama-bench, else quoted), KV restore vs recompute and TTFT, in a few minutes. The "
        "scheduler's queueing gain is `bidaw bench live`'s.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--llama-bench", metavar="PATH", default=None,
                   help="a llama.cpp llama-bench binary: measure llama.cpp on the same GGUF and "
                   "thread count after our figures (default: $BIDAW_LLAMA_BENCH, else the one "
                   "`make llama-bench` built; none: its figures quoted from issue 19)")
    p.set_defaults(func=run)


def run(args) -> int:
    from bench.compute.llamacpp import binary_from
    from bench.compute_bench import run as measure

    result = measure(llama_bench=binary_from(args.llama_bench))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:30s} {value}")
    return 0
