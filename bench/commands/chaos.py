"""`bidaw chaos`: faults injected into live replays, and fuzzing of every gRPC method and HTTP
endpoint; prints what was injected, answered, wrong, lost and crashed."""
from __future__ import annotations

import json

from services.runtime.arg_types import non_negative_int, positive_int


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
    p.add_argument("--turns", type=positive_int, default=24, help="turns replayed per fault")
    p.add_argument("--fuzz-examples", type=non_negative_int, default=200,
                   help="hypothesis examples per fuzzed method (0: no fuzzing)")
    p.add_argument("--fuzz-only", action="store_true",
                   help="no faults and no hypothesis fuzzing: the fast fuzzer only (raw HTTP "
                   "requests by class: surrogates, depth, integers, header bytes, junk; and "
                   "boundary-valued messages to every gRPC method), its figures as JSON")
    p.add_argument("--fuzz-inputs", type=non_negative_int, default=100_000,
                   help="with --fuzz-only: HTTP inputs, spread evenly over the classes")
    p.add_argument("--fuzz-grpc", type=non_negative_int, default=300,
                   help="with --fuzz-only: inputs per gRPC method (a tenth of it, at least 5, "
                   "for RunTurn and SubmitTurn, which may run the model)")
    p.add_argument("--fuzz-concurrency", type=positive_int, default=32,
                   help="with --fuzz-only: HTTP requests in flight")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--details", action="store_true",
                   help="with --json, add each fault's problems (what went wrong, if anything)")
    p.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    p.set_defaults(func=run)


def run_fuzz_only(args) -> int:
    from bench.chaos.fuzz_fast import fuzz_fast_live
    from bench.chaos.fuzz_inputs import CLASSES

    out = fuzz_fast_live(max(1, args.fuzz_inputs // len(CLASSES)), args.fuzz_grpc,
                         max(5, args.fuzz_grpc // 10), concurrency=args.fuzz_concurrency,
                         verbose=args.verbose)
    print(json.dumps(out, indent=1))
    bad = out["http_5xx_or_no_answer"] or out["http_unclear_errors"] or \
        out["grpc_unknown_internal_or_hang"] or out["processes_died"]
    return 1 if bad else 0


def run(args) -> int:
    if args.fuzz_only:
        return run_fuzz_only(args)
    from bench.chaos.faults import ORDER
    from bench.chaos.runner import run as run_faults

    names = [n for n in args.faults.split(",") if n]
    unknown = [n for n in names if n not in ORDER]
    if unknown:
        raise SystemExit(f"bidaw chaos: --faults: unknown {', '.join(unknown)}; known: "
                         f"{', '.join(ORDER)}")
    results = run_faults(names, args.turns, verbose=args.verbose)
    fuzz_inputs = fuzz_crashes = 0
    if args.fuzz_examples:
        from bench.chaos.fuzz_live import fuzz_live

        fuzz_inputs, fuzz_crashes = fuzz_live(args.fuzz_examples, verbose=args.verbose)
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
