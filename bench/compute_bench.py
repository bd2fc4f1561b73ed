"""Figures of the compute side, measured side by side in one run (`bidaw bench compute`).

- prefill of a 1,000-token prompt and decode throughput of the continuous-batching engine
  with 1, 4 and 16 concurrent sessions, dense in float32 and bfloat16 and in the bf16, int8
  and int4 weight formats; the decode roofline of each against the read bandwidth measured in
  the same run, the fastest's decode step profile, and llama.cpp's figures beside them
  (measured by `--llama-bench`'s binary after ours, else quoted; bench/compute/);
- restoring a 2,000-token OPT history from stored tensor 6 vs stored K/V vs recomputing it;
- time to first token of a turn after a 1,000-token history: KV from DRAM vs full recompute.

The scheduler's gain (bidaw vs fcfs queueing) is `bidaw bench live`'s: it needs a busy machine's
batch cap, an SSD cap and enough users to queue, which a compute figure should not wait on.
"""
from __future__ import annotations

import statistics
import tempfile
import time

import torch

from bench.compute.decode import drain, turn
from bench.compute.figures import engine_figures
from bench.compute.llamacpp import measure as measure_llamacpp
from bench.compute.random_models import OPT_125M_SHAPE, random_model
from bench.compute.reference import versus_llamacpp
from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.kv_connector import Recompute
from compute_worker.models.prepare import prepare_model
from compute_worker.store_connector import StoreConnector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from services.runtime.gen import common_pb2

KV, T6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6


def _median_ms(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def restore_vs_recompute(store: KVClient, history: int = 2000) -> dict:
    """Tensor-6 restore vs K/V load vs recompute of an OPT history of `history` tokens."""
    model = random_model(OPT_125M_SHAPE)
    prepare_model(model, "dense")  # fused projections, as a worker runs it
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
    for ids, _, _ in cached.run(turn("ttft", first, 8)):
        answer += ids
    second = first + answer + torch.randint(100, 40000, (20,), generator=gen).tolist()
    dram = [drain(cached, turn("ttft", second, 1)) for _ in range(3)]
    full = [drain(plain, turn("ttft", second, 1)) for _ in range(3)]
    assert all(s.kv_tier == common_pb2.TIER_DRAM for s in dram)
    dram_s = statistics.median(s.ttft_s for s in dram)
    full_s = statistics.median(s.ttft_s for s in full)
    cached.engine.stop()
    plain.engine.stop()
    return {"ttft_1000_dram_s": dram_s, "ttft_1000_recompute_s": full_s,
            "ttft_recompute_over_dram": full_s / dram_s}


def run(sessions=(1, 4, 16), llama_bench: str | None = None) -> dict:
    """Every figure; `llama_bench`: a llama-bench binary to measure llama.cpp with after ours
    (none: its quoted figures)."""
    from compute_worker.loaders.registry import load_model
    from kv_store.main import start

    model, tokenizer = load_model("smollm2-135m")
    result = engine_figures(model, sessions)
    with tempfile.TemporaryDirectory(prefix="bidaw-bench-") as tmp:
        server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=tmp,
                                         dram_bytes=4 << 30))
        store = KVClient(f"127.0.0.1:{server.port}")
        try:
            result.update(restore_vs_recompute(store))
            result.update(ttft_dram_vs_recompute(model, tokenizer, store))
        finally:
            server.stop(0)
            core.close()
    tps = result["decode_tokens_per_s"]
    result["batching_speedup_16_vs_1"] = tps[str(max(sessions))] / tps[str(min(sessions))]
    measured = measure_llamacpp(llama_bench) if llama_bench else None
    result.update(versus_llamacpp(tps[str(min(sessions))],
                                  max(*result["prefill_tokens_per_s"].values(),
                                      *result["prefill_tokens_per_s_by_weights"].values()),
                                  measured))
    return result
