"""Sustainable load: the fastest replay (time scale) at which a system still meets a latency target.

The time scale multiplies the arrival rate (first turns and think times both shrink), so the
cache sees the same access order while the GPU and the SSD see more work per second. For each
system: double or halve the scale until the target is crossed, then bisect on a log scale.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from bench.sim.cost_profile import CostModel
from bench.sim.engine import simulate_system
from bench.sim.workload import build_workload
from bench.traces.turn import Turn

_LIMITS = (1 / 64, 64.0)


def sweep(turns: list[Turn], systems: Iterable[str], cost: CostModel, target_s: float,
          metric: str = "latency_p90", start_scale: float = 1.0, bisect_steps: int = 5,
          window: tuple[float, float] | None = None, sample_users: float | None = None,
          arrival_mode: str = "closed", end_oracle: bool = True, tail_s: float = 600.0,
          **kwargs: Any) -> dict[str, dict]:
    """Per system: the largest time scale meeting `metric <= target_s`, as users/min too."""
    seen: dict[tuple[str, float], tuple[float, float]] = {}

    def measure(name: str, scale: float) -> tuple[float, float]:
        if (name, scale) not in seen:
            w = build_workload(turns, window, sample_users, scale, arrival_mode, tail_s)
            summary = simulate_system(w, cost, name, end_oracle, **kwargs).summary()
            seen[name, scale] = (summary.get(metric, math.inf), w.new_users_per_min())
        return seen[name, scale]

    out: dict[str, dict] = {}
    for name in systems:
        lo, hi = _bracket(lambda x, n=name: measure(n, x)[0] <= target_s, start_scale)
        if lo is None:
            out[name] = {"time_scale": 0.0, "users_per_min": 0.0, metric: None}
            continue
        if hi is not None:
            for _ in range(bisect_steps):
                mid = math.sqrt(lo * hi)
                value, _ = measure(name, mid)
                lo, hi = (mid, hi) if value <= target_s else (lo, mid)
        value, users = measure(name, lo)
        out[name] = {"time_scale": round(lo, 4), "users_per_min": round(users, 2),
                     metric: round(value, 3), "capped": hi is None}
    return out


def _bracket(passes, scale: float) -> tuple[float | None, float | None]:
    """(a passing scale, the failing scale just above it); None where the limits were hit."""
    if passes(scale):
        lo = scale
        while lo * 2 <= _LIMITS[1]:
            if not passes(lo * 2):
                return lo, lo * 2
            lo *= 2
        return lo, None
    hi = scale
    while hi / 2 >= _LIMITS[0]:
        if passes(hi / 2):
            return hi / 2, hi
        hi /= 2
    return None, hi
