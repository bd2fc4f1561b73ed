"""`bidaw bench gpu`: the CUDA check in one run, one JSON object (docs/gpu.md); `--tiny` runs
the same sections on tiny shapes on the CPU, as CI does."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "gpu", help="the CUDA check: tests on the GPU, bf16 throughput, restore, live replay",
        description="On a GPU machine, in under 8 minutes: the exactness and model tests on "
        "CUDA, bfloat16 prefill and decode of random-weight OPT-13B- and Llama-3-8B-shaped "
        "models, tensor-6 -> K/V conversion per 1,000 tokens of OPT-13B, stored K/V -> GPU "
        "GB/s against the pinned-copy limit, and a ~3-minute `bench live` replay. Every "
        "section has its own time budget and reports its error instead of aborting.")
    p.add_argument("--tiny", action="store_true",
                   help="tiny shapes on the CPU, seconds per section, no live replay (CI)")
    p.add_argument("--device", default="", help="torch device (default: cuda, or cpu with --tiny)")
    p.add_argument("--trace", default="", help="trace for the live replay (default: "
                   "$BIDAW_TRACES/bidaw_part1.txt if it exists, else the synthetic generator)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def default_trace() -> str:
    found = Path(os.environ.get("BIDAW_TRACES", "")) / "bidaw_part1.txt"
    return str(found) if os.environ.get("BIDAW_TRACES") and found.is_file() else ""


def run(args) -> int:
    import torch

    from bench.gpu.run import run as check

    try:
        device = torch.device(args.device or ("cpu" if args.tiny else "cuda"))
    except RuntimeError as exc:
        print(f"bidaw: --device: {exc}", file=sys.stderr)
        return 2
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bidaw: --device cuda: torch sees no CUDA device (`bidaw bench gpu --tiny` runs "
              "the CPU smoke mode)", file=sys.stderr)
        return 2
    if args.trace and not Path(args.trace).is_file():
        print(f"bidaw: --trace: no such file {args.trace}", file=sys.stderr)
        return 2
    result = check(device, args.tiny, args.trace or default_trace())
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key:20s} {value}")
    return 0
