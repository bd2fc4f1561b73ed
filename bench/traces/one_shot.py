"""Mix one-shot sessions into a trace: single turns whose users never come back.

Public chat traffic is full of them (a "hi", a benchmark's single prompt); once the gateway
recognises conversations by content, each is a session the KV store keeps and the eviction policy
must rank. `add_one_shot` adds enough of them that a fraction F of all turns are one-shot, with
(query, answer) sizes drawn from the trace's own first turns and arrival times uniform over the
trace's span, both from a seeded generator. The original turns are kept, unchanged and in their
order; the new users get ids above every original id, in order of arrival.
"""
from __future__ import annotations

import heapq
import random
from typing import Sequence

from bench.traces.turn import Turn


def one_shot_count(n_turns: int, fraction: float) -> int:
    """How many one-shot turns to add to `n_turns` so they make `fraction` of the total."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"one-shot fraction must be in [0, 1), got {fraction}")
    return round(fraction * n_turns / (1.0 - fraction))


def add_one_shot(turns: Sequence[Turn], fraction: float, seed: int = 0) -> list[Turn]:
    """`turns` plus one-shot sessions making `fraction` of all turns, merged by arrival time
    (an original turn goes before a one-shot arriving at the same second)."""
    k = one_shot_count(len(turns), fraction)
    if k == 0:
        return list(turns)
    firsts = [(t.query_len, t.answer_len) for t in turns if t.round == 0]
    if not firsts:  # an excerpt with no conversation start: any turn's sizes will do
        firsts = [(t.query_len, t.answer_len) for t in turns]
    rng = random.Random(seed)
    lo = min(t.time for t in turns)
    hi = max(t.time for t in turns)
    whole = all(float(t.time).is_integer() for t in turns)
    times = sorted(rng.uniform(lo, hi) for _ in range(k))
    if whole:  # keep the trace's resolution (the paper's traces have whole seconds)
        times = [float(int(x)) for x in times]
    base = max(t.user for t in turns) + 1
    added = [Turn(base + i, ts, *rng.choice(firsts), 0) for i, ts in enumerate(times)]
    # heapq.merge keeps each input's order and, on equal times, takes the first input first.
    return list(heapq.merge(turns, added, key=lambda t: t.time))

