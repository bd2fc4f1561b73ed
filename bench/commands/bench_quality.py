"""`bidaw bench quality`: each weight format's logits against dense float32's."""
from __future__ import annotations

import copy
import json

from services.runtime.arg_types import positive_int

DEFAULT_FORMATS = "bf16,int8,int4,q4"


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "quality", help="each weight format's next-token logits against dense float32's",
        description="Seeded chat prompts answered greedily by the dense float32 model; each "
        "format reads the same tokens and its logits at every generated position are set against "
        "dense's: top-1 agreement, mean KL divergence, and how many of its own greedy answers "
        "equal dense's. A format that cannot run here is reported with the reason.")
    p.add_argument("--weights", default=DEFAULT_FORMATS, help="comma-separated formats to "
                   "compare with dense (bf16, int8, int4, q4)")
    p.add_argument("--conversations", type=positive_int, default=20, help="prompts to run")
    p.add_argument("--seed", type=int, default=0, help="picks the prompts")
    p.add_argument("--max-tokens", type=positive_int, default=48, help="answer length")
    p.add_argument("--model", default="smollm2-135m", help="a model spec (bidaw serve worker "
                   "--model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _formats(args) -> list[str]:
    from compute_worker.models.quant import WEIGHT_FORMATS

    formats = [f.strip() for f in args.weights.split(",") if f.strip()]
    bad = [f for f in formats if f not in WEIGHT_FORMATS or f == "dense"]
    if not formats or bad:
        raise SystemExit(f"bidaw bench quality: --weights takes formats among "
                         f"{', '.join(WEIGHT_FORMATS[1:])}, not {args.weights!r}")
    return formats


def run(args) -> int:
    formats = _formats(args)
    import torch

    from bench.weights_quality import compare, generated_logits, samples
    from compute_worker.loaders.registry import load_model
    from compute_worker.models.prepare import prepare_model

    base, tokenizer = load_model(args.model, device="cpu", dtype=torch.float32)
    reference = samples(base, tokenizer, args.conversations, args.seed, args.max_tokens)
    logprobs = [generated_logits(base, s) for s in reference]
    result = {"model": args.model, "conversations": args.conversations, "seed": args.seed,
              "max_tokens": args.max_tokens, "formats": {}}
    for fmt in formats:
        model = copy.deepcopy(base)
        try:
            prepare_model(model, fmt)
        except ValueError as exc:  # e.g. q4 without its native kernels: say why
            result["formats"][fmt] = {"skipped": str(exc)}
            if not args.json:
                print(f"{fmt}: skipped ({exc})")
            continue
        report = compare(model, tokenizer, reference, logprobs, args.max_tokens)
        result["formats"][fmt] = report.to_json()
        if not args.json:
            print(f"{fmt}: top-1 agrees at {100 * report.top1_agreement:.1f} % of "
                  f"{report.positions} positions, mean KL {report.mean_kl:.4f}; "
                  f"{report.same_answers}/{args.conversations} greedy answers equal dense's")
    if args.json:
        print(json.dumps(result, indent=1))
    return 0
