"""`bidaw bench live`'s bidaw-prefetch system and its SSD figures (pure: the mapping, the split
of the store's SSD reads, the table)."""
from __future__ import annotations

import pytest

from bench.replay.report import ratios, ssd_reads
from bench.replay.sizing import TierSizes
from bench.replay.systems import SYSTEMS, deployment_kwargs
from bench.replay.table import render


def test_bidaw_prefetch_runs_the_store_with_predictive_promotion():
    sizes = TierSizes(dram_bytes=1 << 28, ideal_dram_bytes=1 << 30, ssd_bytes=1 << 32,
                      ssd_read_gbps_cap=0.0066)
    kw = deployment_kwargs(SYSTEMS["bidaw-promote"], sizes, model="m", time_scale=0.5)
    size = deployment_kwargs(SYSTEMS["bidaw-size"], sizes, model="m", time_scale=0.5)
    assert kw["eviction"] == "bidaw-prefetch" and size["eviction"] == "bidaw-size"
    assert {k: v for k, v in kw.items() if k != "eviction"} == \
        {k: v for k, v in size.items() if k != "eviction"}  # the same system, plus promotion
    both = deployment_kwargs(SYSTEMS["bidaw-prefetch"], sizes, model="m", time_scale=0.5)
    assert both["eviction"] == "bidaw-prefetch"  # promotion, and the load-or-recompute choice
    assert both["extra_args"]["scheduler"][-2:] == ["--restore-choice", "on"]
    assert "--restore-choice" not in kw["extra_args"]["scheduler"]


def test_ssd_reads_split_demand_and_speculative_bytes():
    got = ssd_reads({"ssd_bytes_read": 900_000_000, "speculative_bytes_read": 250_000_000,
                     "prefetch_hits": 7, "prepared_handed_over": 3})
    assert got == {"ssd_demand_mb": pytest.approx(650.0),
                   "ssd_speculative_mb": pytest.approx(250.0), "prefetch_hits": 7,
                   "prepared_handed_over": 3}
    assert ssd_reads({}) == {"ssd_demand_mb": 0.0, "ssd_speculative_mb": 0.0, "prefetch_hits": 0,
                             "prepared_handed_over": 0}


def test_the_table_and_ratios_put_the_systems_side_by_side():
    rows = {"bidaw-size": {"turns": 9, "hit_rate": 0.6, "latency_mean": 2.0, "ttft_mean": 1.0,
                           "ssd_demand_mb": 700.0, "ssd_speculative_mb": 0.0},
            "bidaw-prefetch": {"turns": 9, "hit_rate": 0.75, "latency_mean": 1.5,
                               "ttft_mean": 0.8, "ssd_demand_mb": 500.0,
                               "ssd_speculative_mb": 320.0}}
    header, size, pre = render(rows).splitlines()
    assert "SSD MB demand" in header and "SSD MB spec." in header
    assert size.split()[-2:] == ["700", "0"] and pre.split()[-2:] == ["500", "320"]
    assert "75.0%" in pre and "60.0%" in size
    assert ratios(rows)["bidaw-prefetch/bidaw-size_latency_mean"] == pytest.approx(0.75)
