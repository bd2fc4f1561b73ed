"""A shortened `bidaw bench live` goal run (docs/replay.md): Bidaw and FCFS + LRU on the same
plan, each with a fresh deployment whose worker uses the GPU. One `bench live` per system, each
within its half of the time, so a system that overruns costs only its own figures (the plan
and the tier sizes are seeded and computed alike by both)."""
from __future__ import annotations

import argparse
import json
import sys

from bench.commands import bench_live
from bench.gpu.bounded import run_bounded
from bench.replay.report import ratios

# The goal run's plan and caps, two systems (not four) and no repeat, to fit in ~3 minutes.
SYSTEMS = ("bidaw", "fcfs-lru")
GOAL_FLAGS = ("--users", "80", "--max-rounds", "4", "--time-scale", "0.5", "--window-s", "600",
              "--max-batch", "6", "--load-s", "1.0")
START_S = 40.0  # per system: the deployment's start and stop, and the last turns' drain
KEPT = ("turns", "errors", "skipped", "ttft_mean", "latency_mean", "queueing_mean", "hit_rate",
        "throughput_turns_per_s")
# `bidaw` itself, run as a program (its JSON on stdout, its progress on stderr)
BIDAW = (sys.executable, "-m", "services.cli.main")
TINY_SKIP = ("tiny mode: every system starts a fresh deployment (four processes, the model "
             "loaded) and replays for minutes, too long for a smoke test; the command lines "
             "were checked against `bench live`'s parser")


def live_argv(system: str, trace: str, device_type: str, limit_s: float) -> list[str]:
    """`bidaw bench live ...` for one system, its send deadline leaving START_S of `limit_s`;
    the workers in bfloat16 on CUDA (the tiers sized for its K/V bytes)."""
    cuda = device_type == "cuda"
    source = ["--trace", trace] if trace else ["--format", "synthetic"]
    return ["bench", "live", *source, "--systems", system, *GOAL_FLAGS,
            "--deadline", str(max(10, int(limit_s - START_S))),
            "--dtype", "bfloat16" if cuda else "float32",
            "--turn-s-per-token", "0.03" if cuda else "0.15", "--json"]


def check_argv(argv: list[str]) -> None:
    """Parse `argv` (from "live" on) with `bench live`'s own parser: a flag it no longer takes
    fails here, in CI, instead of on the GPU machine."""
    parser = argparse.ArgumentParser(prog="bidaw bench", exit_on_error=False)
    bench_live.register(None, {"bench": parser.add_subparsers(dest="bench_command")})
    try:
        parser.parse_args(argv[1:])
    except (argparse.ArgumentError, SystemExit) as exc:
        raise ValueError(f"bench live rejects {' '.join(argv)}: {exc}") from None


def one_system(argv: list[str], limit_s: float) -> dict:
    """The system's row of `bench live --json`, or its error and the end of its output."""
    done = run_bounded([*BIDAW, *argv], limit_s)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])["systems"]
    why = f"ran past {limit_s:.0f} s" if done.returncode is None else \
        f"exited {done.returncode}"
    return {"error": f"bench live {why}", "tail": done.tail()}


def live(trace: str, device_type: str, tiny: bool, limit_s: float) -> dict:
    each = limit_s / len(SYSTEMS)
    argvs = {name: live_argv(name, trace, device_type, each) for name in SYSTEMS}
    for argv in argvs.values():
        check_argv(argv)
    commands = {name: " ".join(["bidaw", *argv]) for name, argv in argvs.items()}
    if tiny:
        return {"skipped": TINY_SKIP, "commands": commands}
    rows, errors = {}, {}
    for name, argv in argvs.items():
        got = one_system(argv, each)
        if "error" in got:
            errors[name] = got
        else:
            rows.update(got)
    out = {"commands": commands, "ratios": ratios(rows),
           "systems": {n: {k: row.get(k) for k in KEPT} for n, row in rows.items()}}
    if errors:
        out["error"] = "; ".join(f"{n}: {e['error']}" for n, e in errors.items())
        out["system_errors"] = errors
    return out
