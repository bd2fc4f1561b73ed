"""`bidaw bench exactness`: greedy answers from restored KV against recompute, per dtype."""
from __future__ import annotations

import json
import sys

from services.runtime.arg_types import positive_int

FORMATS = ("kv", "tensor6")


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "exactness", help="restored-KV answers against recompute, over seeded conversations",
        description="Runs N seeded multi-turn conversations with the real model: each turn's "
        "greedy answer from the KV a real store restored is compared with a recompute of the "
        "whole history. Prints how many conversations match and, for the others, the turn and "
        "token where they first diverge.")
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16")
    p.add_argument("--weights", default="dense", help="dense, bf16, int8, int4 or q4 (the linears' "
                   "format: bidaw serve worker --weights)")
    p.add_argument("--conversations", type=positive_int, default=100, help="conversations to run")
    p.add_argument("--turns", type=positive_int, default=3, help="turns per conversation")
    p.add_argument("--seed", type=int, default=0, help="picks the conversations")
    p.add_argument("--max-tokens", type=positive_int, default=24, help="answer length per turn")
    p.add_argument("--kv-format", default="kv", help="kv or tensor6 (what the store holds)")
    p.add_argument("--ssd", action="store_true", help="a store with no DRAM tier: KV from SSD")
    p.add_argument("--model", default="smollm2-135m", help="a model spec (bidaw serve worker "
                   "--model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _check(args) -> None:
    from compute_worker.loaders.dtype_choice import DTYPES

    if args.dtype not in DTYPES:
        raise SystemExit(f"bidaw bench exactness: --dtype must be one of {', '.join(DTYPES)}, "
                         f"not {args.dtype!r}")
    from compute_worker.models.quant import WEIGHT_FORMATS

    if args.weights not in WEIGHT_FORMATS:
        raise SystemExit(f"bidaw bench exactness: --weights must be one of "
                         f"{', '.join(WEIGHT_FORMATS)}, not {args.weights!r}")
    if args.weights == "bf16" and args.dtype != "float32":
        raise SystemExit("bidaw bench exactness: --weights bf16 needs --dtype float32")
    if args.kv_format not in FORMATS:
        raise SystemExit(f"bidaw bench exactness: --kv-format must be kv or tensor6, "
                         f"not {args.kv_format!r}")
    for name in ("conversations", "turns", "max_tokens"):
        if getattr(args, name) < 1:
            raise SystemExit(f"bidaw bench exactness: --{name.replace('_', '-')} must be >= 1")


def run(args) -> int:
    _check(args)
    from bench.exactness import local_store, run_exactness
    from compute_worker.kv_codec import KV, TENSOR6
    from compute_worker.loaders.dtype_choice import DTYPES
    from compute_worker.loaders.registry import load_model
    from compute_worker.models.prepare import prepare_model

    model, tokenizer = load_model(args.model, device="cpu", dtype=DTYPES[args.dtype])
    prepare_model(model, args.weights)

    def progress(done, report):
        if not args.json:
            print(f"\r{done}/{args.conversations} conversations, {report.matched} match",
                  end="", file=sys.stderr, flush=True)

    with local_store(args.ssd) as store:
        report = run_exactness(model, tokenizer, store, args.conversations, args.turns,
                               args.seed, args.max_tokens,
                               KV if args.kv_format == "kv" else TENSOR6, progress)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
        return 0
    print(file=sys.stderr)
    print(f"{report.dtype}, weights {report.weights}: {report.matched}/{report.conversations} "
          f"conversations match "
          f"recompute token for token ({report.restored_tokens} prompt tokens restored)")
    for d in report.divergences:
        print(f"  conversation {d.conversation}: first differs at turn {d.turn}, "
              f"answer token {d.token}")
    return 0
