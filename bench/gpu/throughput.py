"""Prefill and decode throughput of one random-weight model through the serving engine, the
decode roofline at batch 1, and decode at the largest batch with each attention path forced:
through the engine (short contexts) and as bare steps over long ones."""
from __future__ import annotations

import statistics
import time

import torch

from bench.compute.decode import MEAN_CONTEXT, decode_throughput, decode_weight_bytes
from bench.compute.dtypes import prefill_tokens_per_s
from bench.compute.roofline import decode_bytes_per_token, roofline_fraction
from compute_worker.models.attention import forced_path, fused_rows

PREFILL_TOKENS = 1000
SESSIONS = (1, 16)
LONG_CONTEXT = 1000  # keys per sequence of the bare decode steps


def throughput(model, read_gbps: float | None) -> dict:
    """The figures of `model` (on its device, in its dtype); `read_gbps`: the device's read
    bandwidth measured in the same run (None: it failed, and there is no roofline)."""
    weights = decode_weight_bytes(model)
    decode = {str(n): decode_throughput(model, n) for n in SESSIONS}
    kv_token = model.config.kv_bytes_per_token(torch.finfo(model.dtype).bits // 8)
    per_token = decode_bytes_per_token(weights, kv_token, MEAN_CONTEXT)
    most = max(SESSIONS)
    by_path = {}
    for path in ("loop", "fused"):
        with forced_path(path):
            by_path[path] = decode_throughput(model, most)
    return {
        "weight_gib": weights / 2**30,
        "prefill_tokens_per_s": prefill_tokens_per_s(model, PREFILL_TOKENS),
        "decode_tokens_per_s": decode,
        "decode_roofline_fraction": roofline_fraction(per_token, decode["1"], read_gbps)
        if read_gbps else None,
        f"decode_{most}_tokens_per_s_by_attention": by_path,
        f"decode_step_ms_{most}x{LONG_CONTEXT}_by_attention": {
            path: decode_step_ms(model, most, LONG_CONTEXT, path) for path in ("loop", "fused")},
        f"attention_rule_at_{most}": "fused" if fused_rows(model.device.type, [1] * most)
        else "loop",
    }


def decode_step_ms(model, sessions: int, context: int, path: str, steps: int = 5) -> float:
    """Median ms of one decode step of `sessions` sequences over `context` cached keys each
    (random K/V in place of a prefill), with the attention path forced."""
    cfg, device = model.config, model.device
    caches = []
    for _ in range(sessions):
        cache = model.new_cache(context + steps + 1)
        cache.extend(0.1 * torch.randn(cfg.num_layers, 2, cfg.num_kv_heads, context,
                                       cfg.head_dim, device=device, dtype=model.dtype))
        caches.append(cache)
    token = torch.tensor([5])
    times = []
    with forced_path(path):
        for _ in range(steps + 1):  # the first is a warm-up
            start = time.perf_counter()
            out = model.forward([(token, c) for c in caches], logits_last_only=True)
            float(out[-1].logits[0, 0])  # waits for an accelerator too
            times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) * 1000
