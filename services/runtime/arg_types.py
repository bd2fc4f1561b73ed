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


def positive(text: str) -> float:
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def non_negative(text: str) -> float:
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def positive_int(text: str) -> int:
    value = integer(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def non_negative_int(text: str) -> int:
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_list(text: str) -> list[float]:
    """A comma list of numbers > 0 (a sweep)."""
    values = [positive(x.strip()) for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"no value in {text!r}")
    return values


def fraction(text: str) -> float:
    """In [0, 1)."""
    value = number(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def unit_fraction(text: str) -> float:
    """In [0, 1]."""
    value = number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def share(text: str) -> float:
    """In (0, 1]: a share that keeps something."""
    value = number(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free one, or off where the flag says so)."""
    value = integer(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 0-65535, got {text}")
    return value
