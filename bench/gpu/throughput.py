"""Prefill and decode throughput of one random-weight model through the serving engine, the
decode roofline at batch 1, and decode at the largest batch with each attention path forced."""
from __future__ import annotations

import torch

from bench.compute.decode import MEAN_CONTEXT, decode_throughput, weight_bytes
from bench.compute.dtypes import prefill_tokens_per_s
from bench.compute.roofline import decode_bytes_per_token, roofline_fraction
from compute_worker.models.attention import forced_path, fused_rows

PREFILL_TOKENS = 1000
SESSIONS = (1, 16)


def throughput(model, read_gbps: float | None) -> dict:
    """The figures of `model` (on its device, in its dtype); `read_gbps`: the device's read
    bandwidth measured in the same run (None: it failed, and there is no roofline)."""
    weights = weight_bytes(model)
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
        f"attention_rule_at_{most}": "fused" if fused_rows(model.device.type, [1] * most)
        else "loop",
    }
