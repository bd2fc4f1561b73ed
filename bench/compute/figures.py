"""The engine's figures in each dtype it can run here, side by side in one run."""
from __future__ import annotations

import torch

from bench.compute.bandwidth import describe, memory_read_gbps
from bench.compute.decode import MEAN_CONTEXT, decode_throughput, weight_bytes
from bench.compute.dtypes import cast_copy, prefill_tokens_per_s
from bench.compute.profile import decode_step_breakdown
from bench.compute.roofline import decode_bytes_per_token, roofline_fraction


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def engine_figures(model, sessions=(1, 4, 16), prefill_tokens: int = 1000,
                   read_bytes: int = 1 << 30) -> dict:
    """Prefill and decode throughput of `model` and of its copy in the other of float32 and
    bfloat16, the decode roofline at batch 1 in the faster decode dtype, and that dtype's decode
    step profile at the smallest and largest batch."""
    models = {_name(model.dtype): model}
    other = torch.bfloat16 if model.dtype == torch.float32 else torch.float32
    copy, why = cast_copy(model, other)
    if copy is not None:
        models[_name(other)] = copy
    read_gbps = memory_read_gbps(read_bytes, model.device)
    out = {"memory_read_gbps": read_gbps, "memory_read_method": describe(read_bytes)}
    if why:
        out[f"{_name(other)}_error"] = why
    out["prefill_tokens_per_s"] = {name: prefill_tokens_per_s(m, prefill_tokens)
                                   for name, m in models.items()}
    by_dtype = {name: {str(n): decode_throughput(m, n) for n in sessions}
                for name, m in models.items()}
    one, most = str(min(sessions)), max(sessions)
    dtype = max(by_dtype, key=lambda name: by_dtype[name][one])
    fast = models[dtype]
    per_token = decode_bytes_per_token(
        weight_bytes(fast), fast.config.kv_bytes_per_token(torch.finfo(fast.dtype).bits // 8),
        MEAN_CONTEXT)
    out.update({
        "decode_dtype": dtype, "decode_tokens_per_s": by_dtype[dtype],
        "decode_tokens_per_s_by_dtype": by_dtype, "decode_bytes_per_token": per_token,
        "decode_roofline_fraction": roofline_fraction(per_token, by_dtype[dtype][one], read_gbps),
        "decode_step_breakdown_ms": {str(n): decode_step_breakdown(fast, n)
                                     for n in sorted({min(sessions), most})}})
    return out
