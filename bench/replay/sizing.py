"""How much KV a plan stores and keeps alive, and the tier sizes that make DRAM a fraction of
it. Pure.

The working set is all the KV the replayed window stores (every session's final size), the
paper's sense of it: its workload's KV is 3.91x the DRAM tier. The peak of *live* KV (sessions
that will be used again, from a turn's send to the session's next turn, a turn lasting
answer_len x `turn_s_per_token`) is reported beside it: at DRAM = working set / 3.91 it is about
1.5x DRAM, as in the paper's cache setting (6600-7200 s, 30% sample, 200 GiB: 335 GiB of live
K/V at the peak, 1.68x). Sizing DRAM from the live peak instead left room for a quarter of the
sessions awaiting reuse, where no policy can beat random (measured: 26% hits for every policy).
The ideal gets DRAM larger than all KV ever stored.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.replay.plan import Plan

PAPER_WS_RATIO = 3.91


@dataclass(frozen=True)
class WorkingSet:
    peak_bytes: int          # most KV awaiting reuse at one time
    total_bytes: int         # all KV stored by the end (every session's final size): the working set
    reuse_bytes_median: int  # median KV a returning turn needs loaded
    reuses: int              # turns that continue a session
    reuse_bytes_p90: int = 0


def working_set(plan: Plan, bytes_per_token: int, turn_s_per_token: float = 0.0) -> WorkingSet:
    events: list[tuple[float, int]] = []  # (time, change in live bytes)
    final: dict[str, int] = {}
    reuse: list[int] = []
    for u in plan.users:
        now, busy = u.start_s, 0.0
        held: dict[str, int] = {}  # session -> bytes alive since its previous turn
        for i, t in enumerate(u.turns):
            now += busy + t.think_s
            busy = t.answer_len * turn_s_per_token
            if t.history_tokens and t.session in held:
                reuse.append(held[t.session])
                events.append((now, -held.pop(t.session)))
            size = (t.history_tokens + t.query_len + t.answer_len) * bytes_per_token
            final[t.session] = size
            nxt = u.turns[i + 1] if i + 1 < len(u.turns) else None
            if nxt is not None and nxt.session == t.session:
                held[t.session] = size
                events.append((now, size))
    events.sort(key=lambda e: (e[0], e[1]))  # at a tie, free before allocating
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    reuse.sort()
    return WorkingSet(peak, sum(final.values()), int(statistics.median(reuse)) if reuse else 0,
                      len(reuse), reuse[int(0.9 * (len(reuse) - 1))] if reuse else 0)


@dataclass(frozen=True)
class TierSizes:
    dram_bytes: int       # the limited systems' DRAM tier
    ideal_dram_bytes: int  # the ideal's: more than all KV ever stored
    ssd_bytes: int
    ssd_read_gbps_cap: float  # 0: no cap
    ssd_read_burst_bytes: int = -1  # the store's --ssd-read-burst-bytes (-1: its default)


def tier_sizes(ws: WorkingSet, ratio: float = PAPER_WS_RATIO, load_s: float = 1.0,
               dram_bytes: int = 0, ssd_read_gbps_cap: float | None = None,
               min_dram_bytes: int = 0) -> TierSizes:
    """DRAM = working set (all KV stored) / ratio; the SSD cap makes the median reuse load take
    `load_s`.

    Why a cap: in the paper (OPT-13B, 800 KiB/token, 1.5 GB/s) loading 1k tokens of history
    takes ~0.55 s, about half of a 45-token answer's decode; here the page cache would make the
    same load nearly free, so the cap restores a load time of the order of a turn's compute.
    `min_dram_bytes` keeps DRAM above a few sessions' KV: with few users, working set / ratio can
    be smaller than one session, and then no policy can matter. Values given explicitly win."""
    dram = dram_bytes or max(1 << 20, int(ws.total_bytes / ratio), min_dram_bytes)
    ideal = 2 * ws.total_bytes + (64 << 20)
    ssd = 2 * ws.total_bytes + (256 << 20)
    if ssd_read_gbps_cap is None:
        ssd_read_gbps_cap = ws.reuse_bytes_median / load_s / 1e9 if ws.reuse_bytes_median else 0.0
    return TierSizes(dram, ideal, ssd, round(ssd_read_gbps_cap, 6))
