"""argparse `type=` checks shared by the bench commands: a bad value is argparse's one-line
usage error naming the flag (`argument --dram-gib: must be > 0, got -5`), never a traceback or
a run on nonsense."""
from __future__ import annotations

import argparse
import math


def number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return value


def _at_least(value, text: str, low: float, strict: bool, wanted: str):
    if value < low or (strict and value == low):
        raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive(text: str) -> float:
    return _at_least(number(text), text, 0, True, "> 0")


def non_negative(text: str) -> float:
    return _at_least(number(text), text, 0, False, ">= 0")


def positive_int(text: str) -> int:
    return _at_least(integer(text), text, 1, False, "a positive integer")


def non_negative_int(text: str) -> int:
    return _at_least(integer(text), text, 0, False, ">= 0")


def positive_list(text: str) -> list[float]:
    """A comma list of numbers > 0 (a sweep)."""
    values = [positive(x.strip()) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"no value in {text!r}")
    return values


def positive_int_list(text: str) -> list[int]:
    """A comma list of integers > 0."""
    values = [positive_int(x.strip()) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"no value in {text!r}")
    return values


def _within(text: str, ok, interval: str) -> float:
    value = number(text)
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be in {interval}, got {text}")
    return value


def fraction(text: str) -> float:
    return _within(text, lambda v: 0.0 <= v < 1.0, "[0, 1)")


def unit_fraction(text: str) -> float:
    return _within(text, lambda v: 0.0 <= v <= 1.0, "[0, 1]")


def rounds_mean(text: str) -> float:
    """Mean turns per synthetic session: past 10,000 the gamma draw overflows (1e308 did)."""
    return _within(text, lambda v: 0.0 < v <= 10_000.0, "(0, 10000]")


def share(text: str) -> float:
    """A share that keeps something."""
    return _within(text, lambda v: 0.0 < v <= 1.0, "(0, 1]")


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free one, or off where the flag says so)."""
    value = integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 0-65535, got {text}")
    return value
