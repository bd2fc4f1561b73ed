"""Plain-text summary tables. Pure."""
from __future__ import annotations

COLUMNS = (  # (header, summary key, format)
    ("turns", "turns", "{:d}"),
    ("err", "errors", "{:d}"),
    ("skip", "skipped", "{:d}"),
    ("TTFT mean", "ttft_mean", "{:.2f}s"),
    ("TTFT p99", "ttft_p99", "{:.2f}s"),
    ("lat mean", "latency_mean", "{:.2f}s"),
    ("lat p99", "latency_p99", "{:.2f}s"),
    ("queue", "queueing_mean", "{:.2f}s"),
    ("hit", "hit_rate", "{:.1%}"),
    ("turns/s", "throughput_turns_per_s", "{:.3f}"),
    ("SSD MB demand", "ssd_demand_mb", "{:.0f}"),
    ("SSD MB spec.", "ssd_speculative_mb", "{:.0f}"),
)
PREPARED = (  # shown when a client prepared its turns (--prepare-lead-s)
    ("prepared", "prepared_turns", "{:d}"),
    ("prep. DRAM", "prepared_dram_hits", "{:d}"),
)


def render(rows: dict[str, dict]) -> str:
    """One line per system (name -> summary), aligned columns."""
    columns = COLUMNS + (PREPARED if any(s.get("prepared_turns") for s in rows.values()) else ())
    header = ["system", *(c[0] for c in columns)]
    body = [[name, *(fmt.format(s.get(key, 0)) for _, key, fmt in columns)]
            for name, s in rows.items()]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), *(line(r) for r in body)])


def render_ratios(ratios: dict[str, float]) -> str:
    return "\n".join(f"{k:34s} {v:.2f}x" for k, v in ratios.items())
