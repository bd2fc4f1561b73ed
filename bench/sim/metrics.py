"""Per-turn timings of one simulated system and their summary (the JSON the command prints)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TurnLog:
    arrival: list[float] = field(default_factory=list)
    dispatch: list[float] = field(default_factory=list)     # left the queue for the GPU
    first_token: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    hits: int = 0
    misses: int = 0          # KV on SSD, or lost and recomputed
    ssd_bytes: int = 0       # read from SSD for measured turns
    load_s: list[float] = field(default_factory=list)       # SSD load durations (measured turns)
    restore_choices: dict[str, int] | None = None  # bidaw-restore: measured turns per choice
    promotions: dict[str, int] | None = None  # bidaw-prefetch: bench.sim.promote's counts
    prepares: dict[str, int] | None = None  # --prepare-lead-s: bench.sim.prepared's counts

    def add(self, arrival: float, dispatch: float, first_token: float, done: float) -> None:
        self.arrival.append(arrival)
        self.dispatch.append(dispatch)
        self.first_token.append(first_token)
        self.done.append(done)

    def latencies(self) -> np.ndarray:
        return np.asarray(self.done) - np.asarray(self.arrival)

    def queueing(self) -> np.ndarray:
        return np.asarray(self.dispatch) - np.asarray(self.arrival)

    def summary(self) -> dict[str, float]:
        n = len(self.arrival)
        if n == 0:
            return {"turns": 0}
        arrival, done = np.asarray(self.arrival), np.asarray(self.done)
        lat, ttft, queue = done - arrival, np.asarray(self.first_token) - arrival, self.queueing()
        lp = np.percentile(lat, [50, 90, 95, 99])
        tp = np.percentile(ttft, [50, 90, 95, 99])
        span = float(done.max() - arrival.min())
        looked = self.hits + self.misses
        out = {
            "turns": n,
            "ttft_mean": float(ttft.mean()), "ttft_p50": float(tp[0]), "ttft_p90": float(tp[1]),
            "ttft_p95": float(tp[2]), "ttft_p99": float(tp[3]),
            "latency_mean": float(lat.mean()), "latency_p50": float(lp[0]),
            "latency_p90": float(lp[1]), "latency_p95": float(lp[2]), "latency_p99": float(lp[3]),
            "queueing_mean": float(queue.mean()), "queueing_p50": float(np.percentile(queue, 50)),
            "queueing_p99": float(np.percentile(queue, 99)),
            "hit_rate": self.hits / looked if looked else 0.0,
            "hits": self.hits, "misses": self.misses,
            "ssd_bytes_read": int(self.ssd_bytes),
            "ssd_read_gbps": self.ssd_bytes / span / 1e9 if span > 0 else 0.0,
            "load_s_mean": float(np.mean(self.load_s)) if self.load_s else 0.0,
            "throughput_turns_per_s": n / span if span > 0 else 0.0,
        }
        if self.restore_choices is not None:  # only systems that choose report it
            out["restore_choices"] = dict(self.restore_choices)
        if self.promotions is not None:
            out.update(self.promotions)
        if self.prepares is not None:
            out.update(self.prepares)
        return out
