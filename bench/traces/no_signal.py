"""Traces where the answer length says nothing about when the user comes back.

Bidaw's eviction bets that a long answer means a long read before the next turn. Two transforms
take that signal away, so a policy can be checked where the bet fails:

- `shuffle_answers`: the answer lengths are permuted across all turns (seeded). Users, arrival
  times, think times, query lengths and rounds are untouched; the multiset of answer lengths too.
  Only the pairing of an answer with the gap after it is destroyed.
- `machine_paced`: a fraction F of the users (chosen with a seeded generator) become scripts that
  send their next turn `gap_s` seconds after the previous one, whatever the answer. "Near zero" is
  a constant 1 s by default: the paper's traces have whole seconds, so it is the shortest gap
  that keeps a turn after its predecessor. A machine-paced user keeps its first arrival, its
  sizes and its rounds; its later turns move to first + k * gap_s. The other users are untouched.
"""
from __future__ import annotations

import random
from typing import Sequence

from bench.traces.turn import Turn


def shuffle_answers(turns: Sequence[Turn], seed: int = 0) -> list[Turn]:
    """`turns` with their answer lengths randomly permuted across all turns, all else kept."""
    answers = [t.answer_len for t in turns]
    random.Random(seed).shuffle(answers)
    return [t._replace(answer_len=a) for t, a in zip(turns, answers)]


def machine_paced_users(turns: Sequence[Turn], fraction: float, seed: int = 0) -> set[int]:
    """round(fraction * users) user ids drawn without replacement (seeded)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"machine-paced fraction must be in [0, 1], got {fraction}")
    users = sorted({t.user for t in turns})
    return set(random.Random(seed).sample(users, round(fraction * len(users))))


def machine_paced(turns: Sequence[Turn], fraction: float, seed: int = 0,
                  gap_s: float = 1.0) -> list[Turn]:
    """`turns` with a fraction of users sending each next turn `gap_s` after the previous one,
    re-sorted by arrival (on equal times a turn keeps its place in the input's order)."""
    if gap_s < 0:
        raise ValueError(f"machine-paced gap must be >= 0 seconds, got {gap_s}")
    paced = machine_paced_users(turns, fraction, seed)
    first: dict[int, float] = {}
    seen: dict[int, int] = {}
    out: list[tuple[float, int, Turn]] = []
    for i, t in enumerate(turns):
        if t.user in paced:
            k = seen.get(t.user, 0)
            seen[t.user] = k + 1
            t = t._replace(time=first.setdefault(t.user, t.time) + k * gap_s)
        out.append((t.time, i, t))
    out.sort(key=lambda x: (x[0], x[1]))
    return [t for _, _, t in out]
