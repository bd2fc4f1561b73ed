"""`bidaw chaos`: faults injected into live replays, and fuzzing of every gRPC method and HTTP
endpoint; prints what was injected, answered, wrong, lost and crashed."""
from __future__ import annotations

import json


def register(sub, groups) -> None:
    from bench.chaos.faults import ORDER

    p = sub.add_parser("chaos", help="fault injection during live replays, and fuzzing",
                       description="For each fault: start a store, compute worker(s) and a "
                       "scheduler, replay real conversations (the public trace's users), inject "
                       "the fault mid-replay, check every answer against a recompute in this "
                       "process and that no acknowledged KV was lost. Then fuzz the gRPC methods "
                       "and HTTP endpoints of a live deployment.")
    p.add_argument("--faults", default=",".join(ORDER),
                   help=f"comma-separated faults (default: all: {','.join(ORDER)})")
    p.add_argument("--turns", type=int, default=24, help="turns replayed per fault")
    p.add_argument("--fuzz-examples", type=int, default=200,
                   help="hypothesis examples per fuzzed method (0: no fuzzing)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--details", action="store_true",
                   help="with --json, add each fault's problems (what went wrong, if anything)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    from bench.chaos.runner import run as run_faults

    names = [n for n in args.faults.split(",") if n]
    results = run_faults(names, args.turns, verbose=args.verbose)
    fuzz_inputs = fuzz_crashes = 0
    if args.fuzz_examples:
        from bench.chaos.fuzz import fuzz_live

        fuzz_inputs, fuzz_crashes, fuzz_problems = fuzz_live(args.fuzz_examples,
                                                             verbose=args.verbose)
    hidden = () if args.details else ("problems", "checks")
    out = {"faults": [{k: v for k, v in r.items() if k not in hidden}
                      for r in results],
           "fuzz_inputs": fuzz_inputs, "fuzz_crashes": fuzz_crashes}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in out["faults"]:
            if "not_run" in r:
                print(f"{r['name']:15} not run: {r['not_run']}")
                continue
            print(f"{r['name']:15} injected {r['injected']:3}  turns {r['turns']:3}  wrong "
                  f"{r['wrong_answers']}  lost KV {r['lost_acknowledged_kv']}  errors "
                  f"{r['errors']}")
        print(f"fuzz: {fuzz_inputs} inputs, {fuzz_crashes} crashes")
    bad = any(r["wrong_answers"] or r["lost_acknowledged_kv"] or r["errors"]
              for r in results) or fuzz_crashes
    return 1 if bad else 0
