"""PNG figures of one or more replays (one line per system): latency CDF, TTFT over time, DRAM
hit rate over time, scheduler queue lengths over time."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from bench.replay.records import ANSWERED, QueueSample, TurnRecord  # noqa: E402
from bench.replay.report import hit_rate_series  # noqa: E402

Runs = dict[str, tuple[Sequence[TurnRecord], Sequence[QueueSample]]]


def _colors(runs: Runs) -> dict[str, str]:
    """One colour per system in every figure, even where a system has nothing to draw."""
    return {name: f"C{i % 10}" for i, name in enumerate(runs)}


def _legend(ax, **kw) -> None:
    if ax.lines:
        ax.legend(fontsize=8, **kw)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_cdf(runs: Runs, path: Path) -> Path:
    color = _colors(runs)
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, (records, _) in runs.items():
        lat = np.sort([r.latency_s for r in records if r.status == ANSWERED])
        if lat.size:
            ax.plot(lat, np.arange(1, lat.size + 1) / lat.size, label=name, color=color[name])
    ax.set(xlabel="end-to-end latency (s)", ylabel="fraction of turns", title="Latency CDF")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def ttft_over_time(runs: Runs, path: Path) -> Path:
    color = _colors(runs)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (records, _) in runs.items():
        ok = sorted((r.sent_s, r.ttft_s) for r in records if r.status == ANSWERED)
        if ok:
            ax.plot(*zip(*ok), ".", ms=3, label=name, alpha=0.7, color=color[name])
    ax.set(xlabel="send time (s from replay start)", ylabel="TTFT (s)", title="TTFT over time")
    ax.grid(alpha=0.3)
    _legend(ax, markerscale=3)
    return _save(fig, path)


def hit_rate_over_time(runs: Runs, path: Path, bin_s: float) -> Path:
    color = _colors(runs)
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, (records, _) in runs.items():
        series = hit_rate_series(records, bin_s)
        if series:
            ax.plot([s[0] for s in series], [s[1] for s in series], "o-", ms=3, label=name,
                    color=color[name])
    ax.set(xlabel="send time (s)", ylabel="DRAM hit rate", ylim=(-0.02, 1.02),
           title=f"DRAM hit rate over time ({bin_s:.0f} s bins)")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


def queue_lengths(runs: Runs, path: Path) -> Path:
    color = _colors(runs)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    for name, (_, samples) in runs.items():
        if samples:
            t = [s.t for s in samples]
            top.plot(t, [s.ready for s in samples], label=name, lw=1, color=color[name])
            bottom.plot(t, [s.preparing for s in samples], label=name, lw=1, color=color[name])
    top.set(ylabel="ready queue", title="Scheduler queues (Scheduler.Stats)")
    bottom.set(ylabel="preparing queue", xlabel="time (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    _legend(top)
    return _save(fig, path)


def write_all(runs: Runs, out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    span = max((r.end_s for recs, _ in runs.values() for r in recs), default=60.0)
    return [latency_cdf(runs, out / "latency_cdf.png"),
            ttft_over_time(runs, out / "ttft_over_time.png"),
            hit_rate_over_time(runs, out / "hit_rate_over_time.png", max(1.0, span / 12)),
            queue_lengths(runs, out / "queue_lengths.png")]
