"""The report and verdict of a load run, from the raw attempts and samples (pure).

Flat RSS, defined: a service is flat when its RSS at the end is at most its RSS just after
warm-up times 1.10 plus 32 MB. "Just after warm-up" and "at the end" are medians over the first
and last tenth of the measured period (at least one sample each), so one sample caught mid-GC or
mid-transfer decides nothing. The 10% absorbs allocator behaviour that is not a leak (arenas grown
to the peak of concurrent turns, pymalloc pools not returned); the 32 MB absorbs steps that are
large relative to a small process (a new thread pool, one more gRPC buffer set). Over ~2,000
turns a ~70 MB service then fails at ~20 KB leaked per turn, a 2 GB one at ~100 KB; the slope
between the two windows and the processes that grew most are reported for smaller trends.
"""
from __future__ import annotations

import statistics
from collections import Counter

from bench.load.records import ERROR, MALFORMED, OK, SHED_429, SHED_503, UNANSWERED, Attempt
from bench.load.sampler import Sample

FLAT_FACTOR = 1.10
FLAT_SLACK_MB = 32.0
WINDOW_FRACTION = 0.10
FAIR_FACTOR = 3.0  # worst turn wait / median turn wait


def flat(after_warmup_mb: float, end_mb: float) -> bool:
    return end_mb <= after_warmup_mb * FLAT_FACTOR + FLAT_SLACK_MB


def _slope_per_min(first: list[tuple[float, float]], last: list[tuple[float, float]]) -> float:
    """MB per minute between the two windows' medians (robust to single spikes, unlike a fit)."""
    dt = statistics.median(t for t, _ in last) - statistics.median(t for t, _ in first)
    if dt <= 0:
        return 0.0
    return 60.0 * (statistics.median(v for _, v in last) -
                   statistics.median(v for _, v in first)) / dt


def rss_report(samples: list[Sample], warmup_s: float) -> dict[str, dict]:
    """Per service: after_warmup, end, max (MB), growth_pct, slope_mb_per_min, flat."""
    measured = [s for s in samples if s.t >= warmup_s] or samples[-1:]
    if not measured:
        return {}
    k = max(1, round(len(measured) * WINDOW_FRACTION))
    out = {}
    for name in measured[0].rss_mb:
        series = [(s.t, s.rss_mb[name]) for s in measured if name in s.rss_mb]
        after = statistics.median(v for _, v in series[:k])
        end = statistics.median(v for _, v in series[-k:])
        out[name] = {
            "after_warmup": round(after, 1), "end": round(end, 1),
            "max": round(max(s.rss_mb.get(name, 0.0) for s in samples), 1),
            "growth_pct": round(100.0 * (end - after) / after, 1) if after else 0.0,
            "slope_mb_per_min": round(_slope_per_min(series[:k], series[-k:]), 2),
            "flat": flat(after, end),
            "grew_most": _grew_most(measured[:k], measured[-k:], name)}
    return out


def _grew_most(first: list[Sample], last: list[Sample], name: str, top: int = 3) -> dict:
    """The processes of a service's tree whose RSS changed most between the two windows (MB;
    a process that appeared or went counts from or to 0)."""
    def medians(window):
        keys = {k for s in window for k in s.procs.get(name, {})}
        return {k: statistics.median(s.procs.get(name, {}).get(k, 0.0) for s in window)
                for k in keys}
    a, b = medians(first), medians(last)
    change = {k: round(b.get(k, 0.0) - a.get(k, 0.0), 1) for k in a.keys() | b.keys()}
    return dict(sorted(change.items(), key=lambda kv: -abs(kv[1]))[:top])


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def _turns(attempts: list[Attempt]) -> dict[tuple[str, int], list[Attempt]]:
    """The attempts of each turn, in the order sent."""
    turns: dict[tuple[str, int], list[Attempt]] = {}
    for a in attempts:
        turns.setdefault((a.session, a.turn), []).append(a)
    return turns


def report(attempts: list[Attempt], samples: list[Sample], *, sessions: int, duration_s: float,
           warmup_s: float, max_tokens: int, queue_bound: int | None,
           wall_s: float | None = None) -> dict:
    counts = Counter(a.outcome for a in attempts)
    ok = [a for a in attempts if a.outcome == OK]
    latencies = [a.end_s - a.sent_s for a in ok]
    queued = [s.queued for s in samples if s.queued is not None]
    running = [s.running for s in samples if s.running is not None]
    rss = rss_report(samples, warmup_s)
    errors = counts[ERROR] + counts[MALFORMED]
    queue_max = max(queued) if queued else None
    examples = Counter(a.error for a in attempts if a.outcome in (ERROR, MALFORMED, UNANSWERED))
    turns = _turns(attempts)
    waits = [t[-1].end_s - t[0].sent_s for t in turns.values() if t[-1].outcome == OK]
    return {
        "sessions": sessions, "duration_s": duration_s,
        "wall_s": round(wall_s, 1) if wall_s is not None else None,
        "warmup_s": warmup_s, "max_tokens": max_tokens,
        "conversations": len({a.session for a in attempts}),
        "attempts": len(attempts), "turns_ok": len(ok),
        "turns_per_s": round(len(ok) / duration_s, 2) if duration_s else None,
        "shed_429": counts[SHED_429], "shed_503": counts[SHED_503],
        "shed_reasons": dict(Counter(a.error for a in attempts
                                     if a.outcome in (SHED_429, SHED_503)).most_common(8)),
        "errors": errors, "malformed": counts[MALFORMED],
        "unanswered_accepted": counts[UNANSWERED],
        "error_examples": dict(examples.most_common(5)),
        "tokens_ok": sum(a.completion_tokens for a in ok),
        "cached_prompt_tokens": sum(a.cached_tokens for a in ok),
        "prompt_tokens": sum(a.prompt_tokens for a in ok),
        "latency_s": {"p50": _pct(latencies, 0.5), "p95": _pct(latencies, 0.95),
                      "max": round(max(latencies), 3) if latencies else None},
        # a user's view: from the first try of a turn to its answer, sheds and waits included
        "turn_wait_s": {"p50": _pct(waits, 0.5), "p95": _pct(waits, 0.95),
                        "max": round(max(waits), 3) if waits else None},
        "turns_sent": len(turns),
        "turns_shed_until_end": sum(t[-1].outcome in (SHED_429, SHED_503)
                                    for t in turns.values()),
        "turns_unserved": sum(t[-1].outcome != OK for t in turns.values()),
        "rss_mb": rss,
        "queue_max": queue_max, "queue_bound": queue_bound,
        "running_max": max(running) if running else None,
        "samples": len(samples), "stats_missed": sum(s.queued is None for s in samples),
        "verdict": {
            "rss_flat": all(r["flat"] for r in rss.values()) if rss else None,
            "queues_bounded": (queue_max <= queue_bound) if queue_max is not None
            and queue_bound is not None else None,
            "no_errors": errors == 0 and counts[UNANSWERED] == 0 and bool(ok),
            "fair_wait": fair_wait(waits)},
    }


def fair_wait(waits: list[float]) -> bool | None:
    """Overload is shared fairly when no turn waited more than FAIR_FACTOR times the median
    (first try to answer, sheds included); None without answered turns."""
    if not waits:
        return None
    return max(waits) <= FAIR_FACTOR * statistics.median(waits)


def passed(verdict: dict) -> bool:
    """Every verdict that could be judged holds (None: not measured, e.g. no pids given)."""
    return all(v is not False for v in verdict.values())
