"""PNG plots of a timed run: latency CDFs per system, queueing time per system, and (with a
sweep) each system's sustainable load."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.sim.metrics import TurnLog


def plot_timed(logs: dict[str, TurnLog], out_dir: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    styles = ("-", "--", ":", "-.")  # systems that coincide stay visible
    for k, (name, log) in enumerate(logs.items()):
        if not log.arrival:
            continue
        for ax, values in ((axes[0], log.latencies()),
                           (axes[1], np.asarray(log.first_token) - np.asarray(log.arrival))):
            v = np.sort(values)
            ax.plot(np.maximum(v, 1e-3), np.arange(1, len(v) + 1) / len(v), label=name,
                    linestyle=styles[k % len(styles)], linewidth=1.2 + 0.4 * (k % 3))
    for ax, title in zip(axes, ("end-to-end latency", "time to first token")):
        ax.set_xscale("log")
        ax.set_xlabel("seconds")
        ax.set_ylabel("fraction of turns")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(str(out / "latency_cdf.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    names = [n for n, log in logs.items() if log.arrival]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(names)), 4))
    x = np.arange(len(names))
    mean = [logs[n].queueing().mean() for n in names]
    p90 = [np.percentile(logs[n].queueing(), 90) for n in names]
    ax.bar(x - 0.2, mean, 0.4, label="mean")
    ax.bar(x + 0.2, p90, 0.4, label="P90")
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylabel("queueing time (s)")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(str(out / "queueing.png"))
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def plot_sustainable_load(sweep: dict[str, dict], out_dir: str, title: str = "") -> str:
    """New users/min each system sustains (`bench/sim/sweep.py`), one bar each; a bar that hit
    the sweep's upper limit is marked "≥"."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(sweep)
    load = [sweep[n]["users_per_min"] for n in names]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(names)), 4))
    bars = ax.bar(np.arange(len(names)), load)
    for bar, name in zip(bars, names):
        mark = "≥ " if sweep[name].get("capped") else ""
        ax.annotate(f"{mark}{sweep[name]['users_per_min']:.1f}",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_xticks(np.arange(len(names)), names, rotation=20, ha="right")
    ax.set_ylabel("sustainable load (new users/min)")
    ax.set_title(title or "sustainable load")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    path = str(Path(out_dir) / "sustainable_load.png")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
