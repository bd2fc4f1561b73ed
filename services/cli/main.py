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
    "services.cli.serve",
    "services.cli.up",
    "services.cli.chat",
    "services.cli.demo",
    "services.cli.certs",
    "services.cli.token",
    "bench.commands.trace",
    "bench.commands.simulate",
    "bench.commands.bench_policies",
    "bench.commands.bench_store",
    "bench.commands.replay",
    "bench.commands.bench_live",
    "bench.commands.bench_cache_replay",
    "bench.commands.bench_compute",
    "bench.commands.bench_gateway",
    "bench.commands.bench_sessions",
    "bench.commands.chaos",
    "bench.commands.load",
]


class DefaultsFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default (ports, sizes, paths: what a newcomer needs to
    know), unless the help already says what the default is. Flags without a value (store_true)
    and options without a default stay as they are."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (not action.option_strings or action.nargs == 0 or default is None
                or default is argparse.SUPPRESS or "default" in text.lower()):
            return text
        shown = "%(default)s" if default not in ("", []) else "empty"
        return f"{text} (default: {shown})"


class BidawParser(argparse.ArgumentParser):
    """Its subcommands' parsers are BidawParsers too (add_subparsers uses the parent's class),
    so every `--help` below `bidaw` shows the defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if kwargs.get("help") is None and kwargs.get("default") is not None:
            kwargs["help"] = "(default: %(default)s)"  # argparse prints no help at all for None
        return super().add_argument(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    parser = BidawParser(prog="bidaw", description="Bidaw: multi-turn LLM serving "
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
