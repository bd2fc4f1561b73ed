"""`bidaw bench live`: the same trace replayed against one fresh deployment per system under test
(recompute, FCFS+LRU, CachedAttention, Bidaw and its ablations, Bidaw-size, the ideal)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from services.runtime.arg_types import non_negative, non_negative_int, positive, positive_int

# Defaults sized for the 2-core CPU box with SmolLM2-135M (see docs/replay.md); on a GPU raise
# --users / --max-rounds / --time-scale and pass --model and --bytes-per-token.
DEFAULTS = dict(users=12, time_scale=0.02, max_rounds=5, max_context=2048)
SMOLLM2_KV_BYTES_PER_TOKEN = 46_080  # float32 K/V on CPU: 30 layers x 2 x 3 heads x 64 x 4 B


def register(sub: argparse._SubParsersAction, groups: dict) -> None:
    from bench.replay.args import add_client_signal_args, add_plan_args
    from bench.replay.systems import ABLATIONS, BASELINE_VARIANTS, DEFAULT_SYSTEMS

    p = groups["bench"].add_parser(
        "live", help="replay one trace against a fresh deployment per system, side by side",
        description="Starts the embedded deployment once per system and replays the same "
        "sampled, time-scaled window of the trace against each. DRAM is sized so the working "
        "set (all KV the window stores) is --ws-ratio times it (paper: 3.91x) and SSD reads "
        "are capped so a median reuse "
        "load takes --load-s seconds; the ideal's DRAM holds all KV.")
    add_plan_args(p, **DEFAULTS, trace_required=False)
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma list (ablations: {', '.join(ABLATIONS)}; baseline variants: "
                   f"{', '.join(BASELINE_VARIANTS)}; 'all' for every one)")
    p.add_argument("--model", default="smollm2-135m", help="model every worker serves")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the workers' dtype (the README's figures: float32; bfloat16 halves "
                   "SmolLM2's KV bytes and the default --bytes-per-token with them)")
    p.add_argument("--bytes-per-token", type=non_negative_int, default=0,
                   help="the model's stored KV bytes per token, sizing the tiers (default: "
                   f"SmolLM2's, {SMOLLM2_KV_BYTES_PER_TOKEN} in float32)")
    p.add_argument("--ws-ratio", type=positive, default=3.91, help="working set / DRAM")
    p.add_argument("--dram-bytes", default="", help="DRAM tier of the limited systems "
                   "(default: working set / --ws-ratio)")
    p.add_argument("--min-dram-sessions", type=positive, default=1.5,
                   help="DRAM at least this many p90-sized session KVs (few users: else DRAM "
                   "could not hold one session and no policy would matter)")
    p.add_argument("--turn-s-per-token", type=positive, default=0.15,
                   help="seconds a turn takes per answer token on this machine, to estimate how "
                   "long sessions stay open (the working set); ~0.15 on the 2-core CPU")
    p.add_argument("--ssd-read-gbps-cap", type=non_negative, default=None,
                   help="SSD read cap in GB/s (default: from --load-s; 0: no cap)")
    p.add_argument("--ssd-burst-bytes", type=non_negative_int, default=None,
                   help="bytes the capped disk may read at once after idle time (default: the "
                   "store's, one read; 0: none, every read at the cap's rate, as on a disk)")
    p.add_argument("--load-s", type=positive, default=1.0,
                   help="seconds a median reuse load should take under the cap")
    p.add_argument("--max-loads", type=positive_int, default=2, help="SSD->DRAM loads at once")
    p.add_argument("--max-batch", type=non_negative_int, default=0,
                   help="worker's batch cap (0: its default, 16); a smaller one makes a busy "
                   "machine queue turns at the scheduler, as a full GPU does")
    p.add_argument("--min-step-ms", type=non_negative, default=0.0,
                   help="worker's step floor: every batch step takes at least this long, as a "
                   "GPU step does however few sequences it holds (0: off)")
    p.add_argument("--repeat", type=positive_int, default=1,
                   help="run every system this many times, in alternating order (A B C, C B A, "
                   "...); the report gives means, each run, and the spread")
    p.add_argument("--deadline", type=non_negative, default=150.0,
                   help="per system: send no turn after this many seconds (0: none)")
    p.add_argument("--data-dir", default="", help="where deployments keep files (default: tmp)")
    add_client_signal_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="DIR", help="write PNG figures (all systems overlaid)")
    p.add_argument("--records-dir", metavar="DIR", help="write SYSTEM.jsonl per-turn records")
    p.set_defaults(func=_run)


def _systems(text: str) -> list[str]:
    from bench.replay.systems import ABLATIONS, BASELINE_VARIANTS, DEFAULT_SYSTEMS, SYSTEMS

    names = [*DEFAULT_SYSTEMS, *BASELINE_VARIANTS, *ABLATIONS] if text == "all" else \
        [s.strip() for s in text.split(",") if s.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    return names


def _run(args: argparse.Namespace) -> int:
    from bench.replay.args import check_prepare_share, describe, plan_config
    from bench.replay.live import LiveOptions
    from bench.replay.plan import make_plan
    from bench.replay.report import combine_repeats, ratios
    from bench.replay.sizing import tier_sizes, working_set
    from bench.replay.source import load_turns
    from bench.traces.turn import TraceError
    from bench.replay.table import render, render_ratios
    from services.runtime.config import parse_size

    check_prepare_share(args, "bench live")

    names = _systems(args.systems)
    try:
        plan = make_plan(load_turns(args.trace, args.format, args.seed), plan_config(args))
    except TraceError:
        raise  # the CLI says where and why in one line, naming --trace
    except ValueError as exc:
        print(f"bidaw: {exc}", file=sys.stderr)
        return 2
    per_token = args.bytes_per_token or SMOLLM2_KV_BYTES_PER_TOKEN // (
        2 if args.dtype == "bfloat16" else 1)
    ws = working_set(plan, per_token, args.turn_s_per_token)
    sizes = tier_sizes(ws, args.ws_ratio, args.load_s,
                       parse_size(args.dram_bytes) if args.dram_bytes else 0,
                       args.ssd_read_gbps_cap, int(args.min_dram_sessions * ws.reuse_bytes_p90))
    if args.ssd_burst_bytes is not None:
        sizes = dataclasses.replace(sizes, ssd_read_burst_bytes=args.ssd_burst_bytes)
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    say(describe(plan))
    say(f"working set (all KV stored) {ws.total_bytes / 2**20:.0f} MiB, live peak "
        f"{ws.peak_bytes / 2**20:.0f} MiB, median reuse {ws.reuse_bytes_median / 2**20:.1f} MiB "
        f"over {ws.reuses} returning turns; "
        f"DRAM {sizes.dram_bytes / 2**20:.0f} MiB ({ws.total_bytes / sizes.dram_bytes:.2f}x, live "
        f"peak {ws.peak_bytes / sizes.dram_bytes:.2f}x), ideal "
        f"{sizes.ideal_dram_bytes / 2**20:.0f} MiB, SSD cap "
        f"{sizes.ssd_read_gbps_cap * 1e3:.1f} MB/s")
    opts = LiveOptions(model=args.model, dtype=args.dtype, max_loads=args.max_loads, max_batch=args.max_batch,
                       min_step_ms=args.min_step_ms, deadline_s=args.deadline,
                       data_dir=args.data_dir, end_after_s=args.end_sessions_after,
                       prepare_lead_s=args.prepare_lead_s, prepare_share=args.prepare_share)
    per_run, runs = _run_all(names, plan, sizes, opts, args.repeat, args.records_dir, say)
    rows = {name: combine_repeats(per_run[name]) for name in names}
    for name in names:
        rows[name].setdefault("store", per_run[name][-1]["store"])
    if args.plot:
        from bench.replay.plots import write_all

        write_all(runs, args.plot)
    out = {"systems": rows, "ratios": ratios(rows), "config": {
        "repeat": args.repeat,
        "window": plan.window, "users": len(plan.users), "turns": plan.turns,
        "time_scale": plan.config.time_scale, "max_rounds": plan.config.max_rounds,
        "working_set_bytes": ws.total_bytes, "live_peak_bytes": ws.peak_bytes,
        "working_set_over_dram": ws.total_bytes / sizes.dram_bytes,
        "live_peak_over_dram": ws.peak_bytes / sizes.dram_bytes,
        "dram_bytes": sizes.dram_bytes, "ideal_dram_bytes": sizes.ideal_dram_bytes,
        "ssd_read_gbps_cap": sizes.ssd_read_gbps_cap,
        "ssd_burst_bytes": args.ssd_burst_bytes, "model": args.model, "dtype": args.dtype,
        "max_batch": args.max_batch, "min_step_ms": args.min_step_ms, "load_s": args.load_s,
        "end_sessions_after_s": args.end_sessions_after,
        "prepare_lead_s": args.prepare_lead_s, "prepare_share": args.prepare_share}}
    if args.repeat > 1:
        out["ratios_per_repeat"] = [ratios({n: per_run[n][i] for n in names})
                                    for i in range(args.repeat)]
    if args.json:
        print(json.dumps(out))
    else:
        print(render(rows))
        print(render_ratios(out["ratios"]))
        for i, each in enumerate(out.get("ratios_per_repeat", ())):
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}x" for k, v in each.items()
                                               if k.endswith("latency_mean")))
    return 0


def _run_all(names, plan, sizes, opts, repeat: int, records_dir: str | None, say):
    """Each system `repeat` times, in alternating order (A B C, C B A, ...) so a machine that
    drifts over the run favours none. Returns each system's rows (one per run) and the records
    and queue samples of its first run (for the plots)."""
    from tqdm import tqdm

    from bench.replay.live import run_system
    from bench.replay.records import write_jsonl
    from bench.replay.report import bench_row, ssd_reads, summarize
    from bench.replay.systems import SYSTEMS

    for name in names:  # what each system stands for, before its figures
        say(f"{name:16s} {SYSTEMS[name].about}")
    per_run: dict[str, list[dict]] = {name: [] for name in names}
    first = {}
    for rep in range(repeat):
        for name in (names if rep % 2 == 0 else names[::-1]):
            tag = name if repeat == 1 else f"{name} #{rep + 1}"
            bar = tqdm(total=plan.turns, unit="turn", desc=f"{tag:16s}", file=sys.stderr,
                       dynamic_ncols=True)
            run = run_system(name, SYSTEMS[name], plan, sizes, opts,
                             on_record=lambda r: bar.update())
            bar.close()
            row = bench_row(summarize(run.result.records, run.result.samples))
            row.update(ssd_reads(run.store_stats), store=run.store_stats)
            per_run[name].append(row)
            first.setdefault(name, (run.result.records, run.result.samples))
            if records_dir:
                suffix = "" if repeat == 1 else f".{rep + 1}"
                write_jsonl(run.result.records, f"{records_dir}/{name}{suffix}.jsonl")
            say(f"{tag}: started in {run.start_s:.0f} s, replay {run.result.wall_s:.0f} s, "
                f"{row['turns']} turns, latency mean {row['latency_mean']:.2f} s")
    return per_run, first
