"""`bidaw bench respell`: the next turn's reuse after sampled answers, saved as generated or
respelt as the next turn spells them (compute_worker/respell.py), side by side."""
from __future__ import annotations

import json
import sys

from services.runtime.arg_types import positive_int


def register(sub, groups) -> None:
    p = groups["bench"].add_parser(
        "respell", help="later turns' KV reuse after sampled answers, respelt or not",
        description="Runs N seeded multi-turn chats with the real model and a real store twice: "
        "each answer's KV saved as generated, then respelt as the next turn's history spells "
        "it. Prints the later turns' cached share, the tokens they prefilled and their TTFT, "
        "for both, and checks every respelt run's answer against a recompute with the same "
        "seed.")
    p.add_argument("--conversations", type=positive_int, default=8, help="conversations to run")
    p.add_argument("--turns", type=positive_int, default=4, help="turns per conversation")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature of every turn (> 0: answers are sampled)")
    p.add_argument("--max-tokens", type=positive_int, default=64, help="answer length per turn")
    p.add_argument("--seed", type=int, default=0, help="picks the conversations and seeds")
    p.add_argument("--model", default="smollm2-135m", help="a model spec (bidaw serve worker "
                   "--model)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    if not 0 <= args.temperature <= 2:
        raise SystemExit("bidaw bench respell: --temperature must be in [0, 2]")
    import torch

    from bench.respell_bench import run_respell
    from compute_worker.loaders.registry import load_model

    model, tokenizer = load_model(args.model, device="cpu", dtype=torch.float32)

    def progress(respelt, done):
        if not args.json:
            print(f"\r{'respelt' if respelt else 'as generated'}: {done}/{args.conversations}",
                  end="", file=sys.stderr, flush=True)

    report = run_respell(model, tokenizer, args.conversations, args.turns, args.temperature,
                         args.max_tokens, args.seed, progress)
    figures = report.to_json()
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    print(file=sys.stderr)
    print(f"{args.conversations} conversations x {args.turns} turns, temperature "
          f"{args.temperature:g}, up to {args.max_tokens} tokens per answer; turns 2..{args.turns}:")
    print(f"{'':14}{'cached share':>14}{'prefilled':>11}{'TTFT mean':>11}{'respelt':>19}")
    for name in ("as_generated", "respelt"):
        m = figures[name]
        print(f"{name.replace('_', ' '):14}{m['cached_share']:>13.1%} "
              f"{m['later_prefilled_tokens']:>10} {m['later_ttft_mean_s']:>9.3f} s "
              f"{m['respelt_turns']:>4} turns, {m['respelt_tokens']:>4} tok")
    print(f"respelt run: {figures['equal_to_recompute']}/{figures['answers']} answers equal to "
          "a recompute of their history with the same seed")
    return 0
