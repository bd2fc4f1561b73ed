"""Summary statistics of a trace: what `bidaw trace stats` prints."""
from __future__ import annotations

from typing import Any

import numpy as np

from bench.traces.turn import Turn


def rank_average(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n with ties given their average rank (as Spearman's rho needs)."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    boundaries = np.flatnonzero(np.diff(xs)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(x)]))
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, ends - starts)
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2:
        return float("nan")
    rx, ry = rank_average(np.asarray(x, float)), rank_average(np.asarray(y, float))
    return float(np.corrcoef(rx, ry)[0, 1])


def _summary(a: np.ndarray) -> dict[str, float]:
    if len(a) == 0:
        return {"mean": float("nan"), "p50": float("nan"), "p90": float("nan"), "p99": float("nan"),
                "max": float("nan")}
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(a.max())}


def gaps_after_answers(turns: list[Turn]) -> tuple[np.ndarray, np.ndarray]:
    """(answer length of a turn, seconds until the same user's next turn), for every such pair."""
    last: dict[int, tuple[float, int]] = {}
    answers, gaps = [], []
    for t in turns:
        prev = last.get(t.user)
        if prev is not None:
            gaps.append(t.time - prev[0])
            answers.append(prev[1])
        last[t.user] = (t.time, t.answer_len)
    return np.asarray(answers, float), np.asarray(gaps, float)


def trace_stats(turns: list[Turn]) -> dict[str, Any]:
    if not turns:
        return {"turns": 0, "users": 0}
    users = np.array([t.user for t in turns])
    _, rounds = np.unique(users, return_counts=True)
    answers, gaps = gaps_after_answers(turns)
    times = np.array([t.time for t in turns])
    duration = float(times.max() - times.min())
    round0 = sum(1 for t in turns if t.round == 0)
    return {
        "turns": len(turns),
        "users": int(len(rounds)),
        "users_with_round0": round0,
        "duration_s": duration,
        "turns_per_s": len(turns) / duration if duration > 0 else float("nan"),
        "new_users_per_min": round0 / (duration / 60.0) if duration > 0 else float("nan"),
        "rounds_per_user": _summary(rounds.astype(float)),
        "query_len": _summary(np.array([t.query_len for t in turns], float)),
        "answer_len": _summary(np.array([t.answer_len for t in turns], float)),
        "gap_s": _summary(gaps),
        "answer_gap_spearman": spearman(answers, gaps),
    }
