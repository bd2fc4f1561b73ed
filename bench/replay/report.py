"""Figures from the raw per-turn records. Pure.

TTFT and latency are the client's (send to first token / to last token), so they include queueing,
KV loading and transport; `queueing` is the scheduler's own queue time from the TurnSummary.
Hit rate = turns whose KV was in DRAM when they arrived / turns that arrived with KV stored (in
DRAM, on SSD or loading); turns the replayer could not look up fall back to the tier the worker
read from. Throughput = answered turns / (last answer end - first send). Prepared turns are the
answered ones whose client said they were coming (--prepare-lead-s); of those, the DRAM hits are
the ones whose KV was in DRAM when they arrived, as for the hit rate.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.replay.records import ANSWERED, FAILED, SKIPPED, QueueSample, TurnRecord

PERCENTILES = (50, 90, 95, 99)
STORED = ("dram", "ssd", "loading")


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    out = {f"{prefix}_mean": float(arr.mean()) if arr.size else 0.0}
    for p in PERCENTILES:
        out[f"{prefix}_p{p}"] = float(np.percentile(arr, p)) if arr.size else 0.0
    return out


def arrival_tier(r: TurnRecord) -> str:
    """Where the turn's KV was when it arrived ('none' if nothing was stored)."""
    if r.tier_at_arrival:
        return r.tier_at_arrival
    return r.kv_tier if r.cached_tokens > 0 else "none"


def hit_counts(records: Sequence[TurnRecord]) -> tuple[int, int]:
    """(DRAM hits, turns that arrived with stored KV) among answered turns."""
    stored = [r for r in records if r.status == ANSWERED and arrival_tier(r) in STORED]
    return sum(arrival_tier(r) == "dram" for r in stored), len(stored)


def by_arrival_tier(answered: Sequence[TurnRecord]) -> dict[str, dict]:
    """Turns, mean latency and mean queueing per tier the KV was in on arrival: where a
    scheduler hides (or pays for) SSD loads."""
    out: dict[str, dict] = {}
    for tier in sorted({arrival_tier(r) for r in answered}):
        group = [r for r in answered if arrival_tier(r) == tier]
        out[tier] = {"turns": len(group),
                     "latency_mean": float(np.mean([r.latency_s for r in group])),
                     "queueing_mean": float(np.mean([r.queue_s for r in group]))}
    return out


def summarize(records: Sequence[TurnRecord], samples: Sequence[QueueSample] = ()) -> dict:
    ok = [r for r in records if r.status == ANSWERED]
    hits, stored = hit_counts(records)
    prepared = [r for r in ok if r.prepared_tier]  # its client said it was coming
    span = (max(r.end_s for r in ok) - min(r.sent_s for r in ok)) if ok else 0.0
    out: dict = {
        "turns": len(ok),
        "errors": sum(r.status == FAILED for r in records),
        "skipped": sum(r.status == SKIPPED for r in records),
        **_stats("ttft", [r.ttft_s for r in ok]),
        **_stats("latency", [r.latency_s for r in ok]),
        **_stats("queueing", [r.queue_s for r in ok]),
        "kv_load_mean": float(np.mean([r.kv_load_s for r in ok])) if ok else 0.0,
        "hit_rate": hits / stored if stored else 0.0,
        "dram_hits": hits,
        "turns_with_stored_kv": stored,
        "prepared_turns": len(prepared),
        "prepared_dram_hits": sum(arrival_tier(r) == "dram" for r in prepared),
        # how long before its send a prepared turn was said to come (R, or less after a short
        # think time: never before the previous answer's end)
        "prepared_lead_mean": float(np.mean([r.sent_s - r.prepared_s for r in prepared]))
        if prepared else 0.0,
        "throughput_turns_per_s": len(ok) / span if span > 0 else 0.0,
        "tokens_per_s": sum(r.completion_tokens for r in ok) / span if span > 0 else 0.0,
        "exact_answers": sum(r.completion_tokens == r.answer_tokens for r in ok),
        "cached_token_share": (sum(r.cached_tokens for r in ok)
                               / max(1, sum(r.prompt_tokens for r in ok))),
        "reversed_splits": sum(r.recomputed_tokens > 0 for r in ok),
        "span_s": span,
        "by_arrival_tier": by_arrival_tier(ok),
    }
    if samples:
        out["ready_queue_mean"] = float(np.mean([s.ready for s in samples]))
        out["preparing_queue_mean"] = float(np.mean([s.preparing for s in samples]))
        out["queued_max"] = max(s.ready + s.preparing for s in samples)
    return out


def ssd_reads(store_stats: dict) -> dict:
    """The store's SSD reads, from its Stats at the end of a run: demand (promotions and
    worker reads) and speculative (predictive promotion: bidaw-promote, bidaw-prefetch) MB, the turns
    whose KV a speculative read had brought into DRAM, and those that took over the end their
    prepared load had landed (kv_store/end_first.py)."""
    total = store_stats.get("ssd_bytes_read", 0)
    spec = store_stats.get("speculative_bytes_read", 0)
    return {"ssd_demand_mb": (total - spec) / 1e6, "ssd_speculative_mb": spec / 1e6,
            "prefetch_hits": store_stats.get("prefetch_hits", 0),
            "prepared_handed_over": store_stats.get("prepared_handed_over", 0)}


BENCH_KEYS = ("ttft_mean", "ttft_p99", "latency_mean", "latency_p99", "queueing_mean",
              "hit_rate", "throughput_turns_per_s", "turns", "errors")


def bench_row(summary: dict) -> dict:
    """The fields `bidaw bench live --json` promises, first, then the rest."""
    return {**{k: summary[k] for k in BENCH_KEYS}, **summary}


def combine_repeats(runs: Sequence[dict]) -> dict:
    """One system's rows from N runs of the same plan: counts summed, every other number the
    mean of the runs; `repeats` keeps each run's row, and `spread` the min and max of the
    means of latency and TTFT."""
    if len(runs) == 1:
        return dict(runs[0])
    out: dict = {}
    for key, first in runs[0].items():
        values = [r[key] for r in runs if key in r]
        if isinstance(first, bool) or not isinstance(first, (int, float)):
            continue
        out[key] = sum(values) if isinstance(first, int) else float(np.mean(values))
    out["repeats"] = [dict(r) for r in runs]
    out["spread"] = {k: [min(r[k] for r in runs), max(r[k] for r in runs)]
                     for k in ("latency_mean", "ttft_mean", "queueing_mean", "hit_rate")}
    return out


def ratios(systems: dict[str, dict]) -> dict[str, float]:
    """Side-by-side ratios of mean latency and TTFT (the machine is noisy: never lone times)."""
    out: dict[str, float] = {}

    def ratio(a: str, b: str, key: str) -> None:
        if a in systems and b in systems and systems[b].get(key):
            out[f"{a}/{b}_{key}"] = systems[a][key] / systems[b][key]

    for key in ("latency_mean", "ttft_mean"):
        ratio("bidaw", "ideal", key)
        ratio("fcfs-lru", "bidaw", key)
        ratio("fcfs-lru-head", "bidaw", key)
        ratio("cachedattention", "bidaw", key)
        ratio("bidaw-size", "ideal", key)
        ratio("bidaw-promote", "bidaw-size", key)
        ratio("bidaw-prefetch", "bidaw-size", key)
        ratio("bidaw-restore", "bidaw", key)
    return out


def hit_rate_series(records: Sequence[TurnRecord], bin_s: float) -> list[tuple[float, float, int]]:
    """(bin middle, DRAM hit rate, turns with stored KV) per `bin_s` of send time."""
    bins: dict[int, list[bool]] = {}
    for r in records:
        if r.status == ANSWERED and arrival_tier(r) in STORED:
            bins.setdefault(int(r.sent_s // bin_s), []).append(arrival_tier(r) == "dram")
    return [((b + 0.5) * bin_s, sum(v) / len(v), len(v)) for b, v in sorted(bins.items())]
