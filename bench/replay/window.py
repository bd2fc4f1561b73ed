"""Which slice of a trace to replay: an explicit [start, end) or the busiest window."""
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


def parse_window(text: str) -> tuple[float, float]:
    """'START:END' in trace seconds -> (start, end)."""
    try:
        start, end = (float(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"window {text!r} is not START:END in seconds") from None
    if end <= start:
        raise ValueError(f"window {text!r} ends before it starts")
    return start, end
