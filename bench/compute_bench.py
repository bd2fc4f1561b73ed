"""Figures of the compute side, measured side by side in one run (`bidaw bench compute`).

- decode throughput of the continuous-batching engine with 1, 4 and 16 concurrent sessions;
- restoring a 2,000-token OPT history from stored tensor 6 vs stored K/V vs recomputing it;
- time to first token of a turn after a 1,000-token history: KV from DRAM vs full recompute;
- queueing and TTFT of the bidaw vs the fcfs scheduler on a live replay of the paper's sample
  trace with DRAM smaller than the working set (through `bidaw bench live`).
"""
from __future__ import annotations

import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.kv_connector import Recompute
from compute_worker.models import ModelConfig, build_model
from compute_worker.store_connector import StoreConnector
from compute_worker.turn_runner import TurnRunner
from compute_worker.turn_summary import TurnSummary
from kv_store.config import StoreConfig
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
OPT_125M_SHAPE = dict(arch="opt", vocab_size=50272, hidden_size=768, intermediate_size=3072,
                      num_layers=12, num_heads=12, num_kv_heads=12, head_dim=64,
                      max_position=2048, hidden_act="relu", name="opt-125m-shape-random")


def random_opt(seed: int = 0):
    """OPT-125M's shape with random weights (no download): timing, not quality."""
    torch.manual_seed(seed)
    model = build_model(ModelConfig(**OPT_125M_SHAPE), device="cpu", dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.02 * torch.randn_like(p))
    return model


def _turn(session: str, ids: list[int], max_tokens: int) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id=session, prompt_token_ids=ids,
                                  max_tokens=max_tokens, ignore_eos=True)


def _drain(runner: TurnRunner, request) -> TurnSummary:
    summary = None
    for _, _, s in runner.run(request):
        summary = s or summary
    return summary


def decode_throughput(model, sessions: int, tokens: int = 32) -> float:
    """Generated tokens per second with `sessions` turns decoding together."""
    engine = Engine(model, max_batch=max(sessions, 1))
    runner = TurnRunner(engine, Recompute(model, KV), None)
    gen = torch.Generator().manual_seed(sessions)
    prompts = [torch.randint(100, 1000, (16,), generator=gen).tolist() for _ in range(sessions)]
    _drain(runner, _turn("warm", prompts[0], 2))
    threads = [threading.Thread(target=_drain, args=(runner, _turn(f"d{i}", p, tokens)))
               for i, p in enumerate(prompts)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    engine.stop()
    return sessions * tokens / elapsed


def _median_ms(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def restore_vs_recompute(store: KVClient, history: int = 2000) -> dict:
    """Tensor-6 restore vs K/V load vs recompute of an OPT history of `history` tokens."""
    model = random_opt()
    ids = torch.randint(3, 50000, (history + 1,), generator=torch.Generator().manual_seed(7))
    ids = ids.tolist()
    connectors = {fmt: StoreConnector(store, model, "opt-bench", fmt) for fmt in (KV, T6)}
    cache = model.new_cache(history + 8)
    out = model.forward([(torch.tensor(ids[:history]), cache)], want_hidden6=True,
                        logits_last_only=True)[0]
    connectors[KV].save("bench-kv", ids, cache, [])
    connectors[T6].save("bench-t6", ids, cache, [out.hidden6])

    def recompute():
        model.forward([(torch.tensor(ids[:history]), model.new_cache(history + 8))],
                      logits_last_only=True)

    kv_ms = _median_ms(lambda: connectors[KV].restore("bench-kv", ids))
    t6_ms = _median_ms(lambda: connectors[T6].restore("bench-t6", ids))
    assert connectors[T6].restore("bench-t6", ids).tokens == history
    return {"kv_load_ms": kv_ms, "tensor6_restore_ms": t6_ms, "recompute_ms": _median_ms(recompute),
            "kv_bytes": history * connectors[KV].bytes_per_token,
            "tensor6_bytes": history * connectors[T6].bytes_per_token}


def ttft_dram_vs_recompute(model, tokenizer, store: KVClient, history: int = 1000) -> dict:
    """TTFT of turn 2 after a `history`-token turn 1: KV from DRAM vs full recompute."""
    gen = torch.Generator().manual_seed(3)
    first = torch.randint(100, 40000, (history,), generator=gen).tolist()
    cached = TurnRunner(Engine(model), StoreConnector(store, model, "smol", KV), tokenizer)
    plain = TurnRunner(Engine(model), Recompute(model, KV), tokenizer)
    answer = []
    for ids, _, _ in cached.run(_turn("ttft", first, 8)):
        answer += ids
    second = first + answer + torch.randint(100, 40000, (20,), generator=gen).tolist()
    dram = [_drain(cached, _turn("ttft", second, 1)) for _ in range(3)]
    full = [_drain(plain, _turn("ttft", second, 1)) for _ in range(3)]
    assert all(s.kv_tier == common_pb2.TIER_DRAM for s in dram)
    dram_s = statistics.median(s.ttft_s for s in dram)
    full_s = statistics.median(s.ttft_s for s in full)
    cached.engine.stop()
    plain.engine.stop()
    return {"ttft_1000_dram_s": dram_s, "ttft_1000_recompute_s": full_s,
            "ttft_recompute_over_dram": full_s / dram_s}


SAMPLE_TRACE = pathlib.Path(__file__).resolve().parents[2] / "shared" / "traces" / \
    "bidaw_sample.txt"


def scheduler_replay(trace: str | pathlib.Path = SAMPLE_TRACE, users: int = 10) -> dict:
    """Mean queueing time and TTFT, bidaw vs fcfs (both with LRU eviction, so only the
    scheduler differs), replaying the same sampled users of `trace` live."""
    cmd = [sys.executable, "-m", "services.cli.main", "bench", "live", "--trace", str(trace),
           "--systems", "fcfs-lru,bidaw-sched-only", "--users", str(users), "--window-s", "300",
           "--time-scale", "0.2", "--max-rounds", "4", "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    rows = out["systems"]
    pick = {"bidaw": rows["bidaw-sched-only"], "fcfs": rows["fcfs-lru"]}
    return {"queueing_mean_s": {k: v["queueing_mean"] for k, v in pick.items()},
            "ttft_mean_s": {k: v["ttft_mean"] for k, v in pick.items()},
            "replay": {"turns": {k: v["turns"] for k, v in pick.items()},
                       "working_set_over_dram": out["config"]["working_set_over_dram"]}}


def run(sessions=(1, 4, 16), replay: bool = True) -> dict:
    from compute_worker.loaders.registry import load_model
    from kv_store.main import start

    model, tokenizer = load_model("smollm2-135m")
    with tempfile.TemporaryDirectory(prefix="bidaw-bench-") as tmp:
        server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=tmp,
                                         dram_bytes=4 << 30))
        store = KVClient(f"127.0.0.1:{server.port}")
        try:
            result = {"decode_tokens_per_s": {str(n): decode_throughput(model, n)
                                              for n in sessions}}
            result.update(restore_vs_recompute(store))
            result.update(ttft_dram_vs_recompute(model, tokenizer, store))
        finally:
            server.stop(0)
            core.close()
    if replay:
        result.update(scheduler_replay())
    tps = result["decode_tokens_per_s"]
    result["batching_speedup_16_vs_1"] = tps[str(max(sessions))] / tps[str(min(sessions))]
    return result
