"""Which slice of a trace to measure or replay: an explicit [start, end) or the busiest one."""
from __future__ import annotations

from typing import Sequence

from bench.traces.turn import Turn


def busiest_window(turns: Sequence[Turn], length_s: float) -> tuple[float, float]:
    """The [start, start + length_s) holding the most turns; `turns` sorted by time.

    An optimal window can always be slid right until it starts at a turn, so only turn times
    are tried (two pointers, O(n)); ties go to the earliest.
    """
    if not turns:
        raise ValueError("the trace has no turns")
    best_start, best_count, hi = turns[0].time, 0, 0
    for lo, first in enumerate(turns):
        while hi < len(turns) and turns[hi].time < first.time + length_s:
            hi += 1
        if hi - lo > best_count:
            best_start, best_count = first.time, hi - lo
    return best_start, best_start + length_s


def parse_window(text: str | None, flag: str = "--window") -> tuple[float, float] | None:
    """'START:END' trace seconds -> (start, end), either side empty for unbounded; None for no
    text. A malformed or empty window raises ValueError naming `flag`."""
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    try:
        if not sep:
            raise ValueError
        start, end = (float(lo) if lo else float("-inf")), (float(hi) if hi else float("inf"))
    except ValueError:
        raise ValueError(f"{flag} wants START:END in trace seconds, got {text!r}") from None
    if end <= start:
        raise ValueError(f"{flag} {text!r} ends before it starts")
    return start, end
