"""The timed simulation of several systems side by side on one trace (`bidaw simulate`'s timed
mode: bench/commands/simulate_timed.py). Every system replays the same workload with fresh
policy objects; metrics count the turns whose trace time is inside the window.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable

from bench.sim.cost_profile import CostModel, load_profile
from bench.sim.engine import simulate_system
from bench.sim.metrics import TurnLog
from bench.sim.systems import DEFAULT_SYSTEMS, system_spec
from bench.sim.workload import CLOSED, build_workload
from bench.traces.turn import Turn

DEFAULT_PROFILE = "opt13b-a800"


def simulate(turns: list[Turn], systems: Iterable[str] = DEFAULT_SYSTEMS,
             profile: str | CostModel = DEFAULT_PROFILE, window: tuple[float, float] | None = None,
             sample_users: float | None = None, time_scale: float = 1.0,
             arrival_mode: str = CLOSED, end_oracle: bool = True, tail_s: float = 600.0,
             show_progress: bool = False, logs: dict[str, TurnLog] | None = None,
             **kwargs: Any) -> dict[str, dict]:
    """Metrics per system, in order. `logs`, if given, receives each system's per-turn log."""
    cost = profile if isinstance(profile, CostModel) else load_profile(profile)
    workload = build_workload(turns, window, sample_users, time_scale, arrival_mode, tail_s)
    out: dict[str, dict] = {}
    for name in systems:
        system_spec(name)  # fail on a bad name before any long run
    for name in systems:
        started = time.perf_counter()
        with _progress_bar(show_progress, workload.measured_count, name) as bar:
            log = simulate_system(workload, cost, name, end_oracle,
                                  progress=bar.update if bar is not None else None, **kwargs)
        out[name] = log.summary()
        out[name]["wall_s"] = round(time.perf_counter() - started, 2)
        if logs is not None:
            logs[name] = log
    return out


class _NoBar:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _progress_bar(show: bool, total: int, name: str):
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=f"{name:>16}", unit="turn", file=sys.stderr, leave=False,
                mininterval=0.5, disable=None)
