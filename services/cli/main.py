"""The `bidaw` command: one entry point whose subcommands live in small modules.

Each module in COMMANDS exposes `register(sub, groups)`; it adds its parser(s) to `sub`
(or to a group such as groups["bench"]) and sets `func` to a handler taking the parsed args and
returning an exit code. Modules import heavy dependencies inside their handlers so `--help` is fast.
"""
from __future__ import annotations

import argparse
import signal
import sys

from bench.commands import (bench_cache_replay, bench_compute, bench_exactness, bench_gateway,
                            bench_gpu, bench_live, bench_policies, bench_quality, bench_respell,
                            bench_sessions, bench_store, chaos, load, replay, simulate, trace)
from bench.traces.turn import TraceError
from services.cli import certs, chat, demo, serve, token, up

# in the order `bidaw --help` lists them
COMMANDS = (serve, up, chat, demo, certs, token, trace, simulate, bench_policies, bench_store,
            replay, bench_live, bench_cache_replay, bench_compute, bench_exactness, bench_respell,
            bench_quality,
            bench_gpu, bench_gateway, bench_sessions, chaos, load)


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

    def parse_known_args(self, args=None, namespace=None):
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and " " in self.prog:  # a subcommand's: refused with its own usage
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

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
    for module in COMMANDS:
        module.register(sub, groups)
    return parser


def _interrupt(*_signal):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else argv
    if given and given[0].startswith("-") and given[0] not in ("-h", "--help"):
        parser.error(f"unrecognized option {given[0]}: the COMMAND comes first (bidaw --help)")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the deployments a bench or demo started are stopped
    # instead of orphaned (`bidaw serve` installs its own handlers).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except TraceError as exc:
        given = _flag_giving(args, exc.path, sys.argv[1:] if argv is None else argv)
        flag = f"{given[0]} " if given else ""
        raise SystemExit(f"bidaw {_command(args)}: {flag}{exc.path}: {exc}") from None
    except OSError as exc:
        problem = _path_problem(args, exc, sys.argv[1:] if argv is None else argv)
        if problem is None:
            raise
        raise SystemExit(f"bidaw {_command(args)}: {problem}") from None


def _command(args: argparse.Namespace) -> str:
    """`simulate`, `trace stats`, `bench live`: the words that chose the handler."""
    return " ".join(filter(None, (args.command, getattr(args, f"{args.command}_command", None))))


def _flag_giving(args: argparse.Namespace, path: str, argv: list[str]) -> tuple[str, str] | None:
    """(flag, its value) of the command's flag given on the command line whose value is `path`
    or a directory holding it; None (a positional argument, or no flag's)."""
    for name, value in vars(args).items():
        flag = "--" + name.replace("_", "-")
        given = any(a == flag or a.startswith(flag + "=") for a in argv)
        if given and isinstance(value, str) and value and (
                path == value or path.startswith(value.rstrip("/") + "/")):
            return flag, value
    return None


def _path_problem(args: argparse.Namespace, exc: OSError, argv: list[str]) -> str | None:
    """One line for a file that could not be read or written (the flag that gave it named, when
    one of the command's flags is that path or holds it), or for an error raised with a message
    only; None for anything else (a bug keeps its traceback)."""
    if exc.filename is None:
        return str(exc) if exc.errno is None and exc.args else None
    path = str(exc.filename)
    reason = exc.strerror or str(exc)
    given = _flag_giving(args, path, argv)
    if given is None:
        return f"{path}: {reason}"
    flag, value = given
    return f"{flag} {value}: {reason}" + (f" ({path})" if path != value else "")


if __name__ == "__main__":
    sys.exit(main())
