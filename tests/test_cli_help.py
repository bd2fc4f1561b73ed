"""Every `bidaw ... --help` shows each option's default (the ports of `bidaw up` included)."""
from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from services.cli.main import build_parser


def parsers(parser: argparse.ArgumentParser, path=("bidaw",)):
    """(command path, parser) for `parser` and every subcommand below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, (*path, name))


ALL = list(parsers(build_parser()))


def test_the_walk_reaches_every_command():
    names = {" ".join(p) for p, _ in ALL}
    assert {"bidaw up", "bidaw chat", "bidaw serve gateway", "bidaw bench store",
            "bidaw chaos", "bidaw trace synth"} <= names


@pytest.mark.parametrize("path,parser", ALL, ids=[" ".join(p) for p, _ in ALL])
def test_help_shows_every_default(path, parser):
    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        parser.parse_args(["--help"])  # renders
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or action.nargs == 0 or action.default in (
                None, argparse.SUPPRESS) or action.help == argparse.SUPPRESS:
            continue
        entry = formatter._expand_help(action)  # the option's help as --help prints it
        assert "".join(entry.split()) in "".join(text.getvalue().split())  # wrapped anywhere
        assert "default" in entry.lower(), (path, action.dest, entry)
        if "default" not in (action.help or "").lower() and action.default not in ("", []):
            assert f"(default: {action.default})" in entry, (path, action.dest, entry)


def test_up_shows_its_ports():
    parser = dict((" ".join(p), q) for p, q in ALL)["bidaw up"]
    text = parser.format_help()
    for port in ("8000", "50051", "50052", "50053"):
        assert f"default: {port}" in text
