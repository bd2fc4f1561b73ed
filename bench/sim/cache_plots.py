"""PNG plots for the cache-only replay: hit rate vs DRAM capacity, answer length vs reuse distance."""
from __future__ import annotations

import os
from typing import Any

from bench.sim.cache import GIB, AccessLog


def plot_cache_only(runs: list[dict[str, Any]], log: AccessLog, window: tuple[float, float] | None,
                    out_dir: str, capacities: list[float]) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    first = [r for r in runs if r.get("ssd_gbps") == runs[0].get("ssd_gbps")]  # one bandwidth
    if len(first) > 1:
        paths.append(plot_hit_rate_vs_dram(first, os.path.join(out_dir, "hit_rate_vs_dram.png")))
    paths.append(plot_answer_vs_reuse(log, window, os.path.join(out_dir, "answer_vs_reuse.png"),
                                      capacities))
    return paths


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_hit_rate_vs_dram(runs: list[dict[str, Any]], path: str) -> str:
    plt = _pyplot()
    caps = [r["dram_gib"] for r in runs]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    gbps = runs[0].get("ssd_gbps")  # with the disk's time a hit counts at the turn's arrival
    where = f" at arrival (SSD {gbps:g} GB/s)" if gbps else ""
    for metric, ax in zip(("hit_rate", "byte_hit_rate"), axes):
        for name in runs[0]["policies"]:
            ax.plot(caps, [100 * r["policies"][name][metric] for r in runs], marker="o", label=name)
        ax.set_xlabel("DRAM capacity (GiB)")
        ax.set_title(metric.replace("_", " ") + where)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("%")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_hit_rate_vs_ssd(runs: list[dict[str, Any]], out_dir: str, time_scale: float) -> str:
    """Hit rate at arrival vs SSD bandwidth, one line per policy and DRAM size."""
    plt = _pyplot()
    path = os.path.join(out_dir, "hit_rate_vs_ssd.png")
    caps = sorted({r["dram_gib"] for r in runs}, reverse=True)
    fig, axes = plt.subplots(1, len(caps), figsize=(5 * len(caps), 4), sharey=True, squeeze=False)
    for cap, ax in zip(caps, axes[0]):
        mine = sorted((r for r in runs if r["dram_gib"] == cap), key=lambda r: r["ssd_gbps"])
        for name in mine[0]["policies"]:
            ax.plot([r["ssd_gbps"] for r in mine],
                    [100 * r["policies"][name]["hit_rate"] for r in mine], marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"SSD bandwidth (GB/s), pace x{time_scale:g}")
        ax.set_title(f"hit rate at arrival, DRAM {cap:g} GiB")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("%")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def answer_vs_reuse(log: AccessLog, window: tuple[float, float] | None) -> tuple[list[int], list[float]]:
    """(previous answer tokens, weighted reuse distance in GiB) for each re-access in the window."""
    from kv_store.eviction.reuse_distance import ReuseDistanceMeter

    start, end = window if window else (float("-inf"), float("inf"))
    meter = ReuseDistanceMeter(horizon=1 << 20)
    last_answer: dict[int, int] = {}
    xs, ys = [], []
    for t, u, size, ans in zip(log.times, log.users, log.sizes, log.answers):
        if t >= end:
            break
        rd = meter.access(u, size)
        if rd is not None and t >= start and u in last_answer:
            xs.append(last_answer[u])
            ys.append(rd / GIB)
        last_answer[u] = ans
    return xs, ys


def plot_answer_vs_reuse(log: AccessLog, window: tuple[float, float] | None, path: str,
                         capacities: list[float]) -> str:
    plt = _pyplot()
    xs, ys = answer_vs_reuse(log, window)
    lowest: dict[int, float] = {}
    for x, y in zip(xs, ys):
        lowest[x] = min(y, lowest.get(x, y))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(xs, ys, s=1, alpha=0.4, label="access")
    lx = sorted(lowest)
    ax.scatter(lx, [lowest[x] for x in lx], s=6, color="red", label="lowest per answer length")
    for cap in capacities:
        ax.axhline(cap, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xlabel("previous answer length (tokens)")
    ax.set_ylabel("weighted reuse distance (GiB)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
