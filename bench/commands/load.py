"""`bidaw load`: many concurrent multi-turn chat sessions through the HTTP gateway for minutes;
reports answered, shed and failed turns, every service's RSS and the scheduler's queues, and
exits 1 if a verdict fails (errors, RSS not flat, queues past their bound)."""
from __future__ import annotations

import dataclasses
import json
import math
import sys

from services.runtime.arg_types import non_negative, positive, positive_int


def register(sub, groups) -> None:
    p = sub.add_parser(
        "load", help="sustained multi-turn chat load: errors, RSS flatness, queue bounds",
        description="Starts the embedded deployment (64 MiB DRAM tier, 2 GiB SSD tier, gateway "
        "and scheduler limits that shed load) unless --target is given, then runs --sessions "
        "chat sessions for --duration seconds: streamed greedy answers of exactly --max-tokens "
        "tokens (ignore_eos), the whole history each turn, a seeded think time between turns, "
        "a new conversation every --turns-per-session turns. 429/503 with Retry-After count as "
        "shedding and the turn is retried; anything else is an error. RSS is flat when the end "
        "is at most 1.10 x the value after --warmup plus 32 MB (bench/load/verdict.py).")
    p.add_argument("--sessions", type=positive_int, default=200, help="concurrent chat sessions")
    p.add_argument("--duration", type=positive, default=600.0, help="seconds of sending turns")
    p.add_argument("--warmup", type=non_negative, default=120.0,
                   help="seconds at the start excluded from the RSS flatness check")
    p.add_argument("--max-tokens", type=positive_int, default=16, help="tokens of every answer")
    p.add_argument("--think-s", default="1:5",
                   help="think time between a session's turns, uniform in LO:HI seconds")
    p.add_argument("--turns-per-session", type=positive_int, default=8,
                   help="turns of one conversation before the session starts a new one")
    p.add_argument("--seed", type=int, default=0, help="seeds messages and think times")
    p.add_argument("--turn-timeout", type=positive, default=300.0,
                   help="seconds after which a turn counts as failed")
    p.add_argument("--interval", type=positive, default=5.0, help="seconds between samples")
    p.add_argument("--target", default="",
                   help="an existing gateway's base URL (http://HOST:PORT/v1) instead of "
                   "starting a deployment")
    p.add_argument("--scheduler", default="",
                   help="with --target: the scheduler HOST:PORT, to sample its queues")
    p.add_argument("--cluster-token-file", default="",
                   help="with --scheduler: the deployment's cluster token file (`bidaw up` "
                   "prints its path), sent on the sampling calls")
    p.add_argument("--queue-bound", type=positive_int, default=None,
                   help="with --target: the scheduler's --max-queue, to judge the queues")
    p.add_argument("--pid", action="append", default=[], metavar="NAME=PID",
                   help="with --target: a service process to sample (its children too); repeat")
    p.add_argument("--api-key", default="", help="Bearer key for the gateway")
    p.add_argument("--max-in-flight", type=positive_int, default=48,
                   help="own deployment: the gateway's --max-in-flight")
    p.add_argument("--max-queue", type=positive_int, default=32,
                   help="own deployment: the scheduler's --max-queue")
    p.add_argument("--dram-bytes", default="64MiB", help="own deployment: DRAM tier")
    p.add_argument("--ssd-bytes", default="2GiB", help="own deployment: SSD tier")
    p.add_argument("--data-dir", default="", help="own deployment: files (default: tmp)")
    p.add_argument("--records", metavar="FILE", help="write every attempt as JSON lines")
    p.add_argument("--samples", metavar="FILE",
                   help="write every sample (RSS per process, queues) as JSON lines")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _think(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(":")
    try:
        lo, hi = float(lo), float(hi or lo)
    except ValueError:
        lo = hi = math.nan
    if not 0 <= lo <= hi < math.inf:
        raise SystemExit(f"bidaw load: --think-s {text!r}: want LO:HI seconds with "
                         "0 <= LO <= HI")
    return lo, hi


def _check_gateway(url: str, api_key: str) -> None:
    """The gateway at `url` answers its model list, or the command stops in one line (it ran
    its whole duration of failed turns before)."""
    import urllib.error
    import urllib.request

    if not url.lower().startswith(("http://", "https://")):
        raise SystemExit(f"bidaw load: --target {url!r}: expected the gateway's URL "
                         "(http://HOST:PORT/v1, what `bidaw up` prints first)")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/models",
                                                      headers=headers), timeout=10).close()
    except urllib.error.HTTPError as exc:
        hint = {401: " (give --api-key KEY)",
                404: " (is it the gateway's base URL, ending in /v1?)"}.get(exc.code, "")
        raise SystemExit(f"bidaw load: --target {url}: HTTP {exc.code}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SystemExit(f"bidaw load: --target {url}: {reason} (is the deployment running?)"
                         ) from None


def run(args) -> int:
    from bench.load import deploy
    from bench.load.driver import LoadPlan
    from bench.load.run import run_against, run_own
    from bench.load.verdict import passed

    plan_args = dict(sessions=args.sessions, duration_s=args.duration,
                     max_tokens=args.max_tokens, think_s=_think(args.think_s),
                     turns_per_session=args.turns_per_session, seed=args.seed,
                     turn_timeout_s=args.turn_timeout, api_key=args.api_key)
    if args.target:
        _check_gateway(args.target, args.api_key)
        if args.cluster_token_file:
            from services.runtime.cluster_auth import configure_token
            from services.runtime.membership_auth import resolve_token

            try:
                configure_token(resolve_token("", args.cluster_token_file))
            except ValueError as exc:
                raise SystemExit(f"bidaw load: {exc}") from None
        pids = {}
        for item in args.pid:
            name, _, pid = item.partition("=")
            pids[name] = int(pid)
        out, attempts, samples = run_against(LoadPlan(url=args.target.rstrip("/"), **plan_args),
                                       pids=pids, scheduler=args.scheduler,
                                       queue_bound=args.queue_bound, warmup_s=args.warmup,
                                       interval_s=args.interval)
    else:
        limits = deploy.LoadLimits(dram_bytes=args.dram_bytes, ssd_bytes=args.ssd_bytes,
                                   max_in_flight=args.max_in_flight, max_queue=args.max_queue,
                                   request_timeout_s=args.turn_timeout)
        out, attempts, samples = run_own(plan_args, limits, warmup_s=args.warmup,
                                   interval_s=args.interval, data_dir=args.data_dir)
    if args.records:
        with open(args.records, "w") as fh:
            for a in attempts:
                fh.write(json.dumps(a.to_json()) + "\n")
    if args.samples:
        with open(args.samples, "w") as fh:
            for s in samples:
                fh.write(json.dumps(dataclasses.asdict(s)) + "\n")
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        v = out["verdict"]
        print(f"{out['sessions']} sessions, {out['duration_s']:.0f} s: {out['turns_ok']} turns "
              f"answered, shed 429 {out['shed_429']} / 503 {out['shed_503']}, errors "
              f"{out['errors']}, unanswered {out['unanswered_accepted']}")
        for name, r in out["rss_mb"].items():
            print(f"  {name:10} RSS {r['after_warmup']:8.1f} -> {r['end']:8.1f} MB "
                  f"(max {r['max']:.1f}, {r['growth_pct']:+.1f}%)")
        w = out["turn_wait_s"]
        print(f"  {out['attempts']} attempts; turn wait p50 {w['p50']} s, p95 {w['p95']} s, "
              f"max {w['max']} s; {out['turns_unserved']} of {out['turns_sent']} turns "
              "unserved at the end")
        print(f"  queue max {out['queue_max']} (bound {out['queue_bound']})")
        print("  verdict: " + ", ".join(f"{k} {val}" for k, val in v.items()))
    sys.stdout.flush()
    return 0 if passed(out["verdict"]) else 1
