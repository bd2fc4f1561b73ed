"""The `bidaw` command: one entry point whose subcommands live in small modules.

Each module listed in COMMANDS exposes `register(sub, groups)`; it adds its parser(s) to `sub`
(or to a group such as groups["bench"]) and sets `func` to a handler taking the parsed args and
returning an exit code. Modules import heavy dependencies inside their handlers so `--help` is fast.
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys

COMMANDS = [
    "services.commands.serve",
    "services.commands.up",
    "services.commands.chat",
    "services.commands.demo",
    "services.commands.certs",
    "services.commands.token",
    "bench.commands.trace",
    "bench.commands.simulate",
    "bench.commands.bench_policies",
    "bench.commands.bench_store",
    "bench.commands.replay",
    "bench.commands.bench_live",
    "bench.commands.bench_cache_replay",
    "bench.commands.bench_compute",
    "bench.commands.bench_gateway",
    "bench.commands.chaos",
    "bench.commands.load",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bidaw", description="Bidaw: multi-turn LLM serving "
                                     "with a DRAM+SSD KV cache.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bench = sub.add_parser("bench", help="benchmarks that print figures")
    groups = {"bench": bench.add_subparsers(dest="bench_command", required=True, metavar="BENCH")}
    for name in COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real import error inside an existing module
                raise
            continue  # a command not built yet
        module.register(sub, groups)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the deployments a bench or demo started are stopped
    # instead of orphaned (`bidaw serve` installs its own handlers).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
