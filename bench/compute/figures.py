"""The engine's figures in each dtype and weight format it can run here, side by side in one
run."""
from __future__ import annotations

import copy

import torch

from bench.compute.bandwidth import describe, memory_read_gbps
from bench.compute.decode import MEAN_CONTEXT, decode_throughput, decode_weight_bytes
from bench.compute.dtypes import cast_copy, prefill_tokens_per_s
from bench.compute.profile import decode_step_breakdown
from bench.compute.roofline import decode_bytes_per_token, roofline_fraction
from compute_worker.models.prepare import prepare_model

QUANTIZED = ("bf16", "int8", "int4", "q4")  # weight formats, run in the model's dtype (float32)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def variants(model, weights=QUANTIZED) -> tuple[dict, dict[str, str]]:
    """{name: model} for `model` with fused projections (in place: bit for bit the same
    numbers), its dense copy in the other of float32 and bfloat16, and a copy in each weight
    format of `weights`; and {name: why} for a variant that cannot run here."""
    prepare_model(model, "dense")
    out, errors = {_name(model.dtype): model}, {}
    other = torch.bfloat16 if model.dtype == torch.float32 else torch.float32
    cast, why = cast_copy(model, other)
    if cast is not None:
        out[_name(other)] = cast
    else:
        errors[_name(other)] = why
    for fmt in weights:
        quantized = copy.deepcopy(model)
        try:
            prepare_model(quantized, fmt)
            out[fmt] = quantized
        except (RuntimeError, ValueError) as exc:
            errors[fmt] = f"{type(exc).__name__}: {exc}"
    return out, errors


def bytes_per_token(model) -> float:
    """What one decoded token reads at batch 1 in `model`'s format: its weights as stored, plus
    the K/V of MEAN_CONTEXT tokens in the model dtype."""
    kv = model.config.kv_bytes_per_token(torch.finfo(model.dtype).bits // 8)
    return decode_bytes_per_token(decode_weight_bytes(model), kv, MEAN_CONTEXT)


def engine_figures(model, sessions=(1, 4, 16), prefill_tokens: int = 1000,
                   read_bytes: int = 1 << 30, weights=QUANTIZED) -> dict:
    """Prefill and decode throughput of `model` in float32 and bfloat16 (dense) and in each
    weight format of `weights`, the decode roofline at batch 1 of each from the bytes it reads,
    and the fastest variant's decode step profile at the smallest and largest batch."""
    models, errors = variants(model, weights)
    read_gbps = memory_read_gbps(read_bytes, model.device)
    one_core = memory_read_gbps(read_bytes, model.device, threads=1)
    out = {"memory_read_gbps": read_gbps, "memory_read_gbps_one_thread": one_core,
           "memory_read_method": describe(read_bytes)}
    out.update({f"{name}_error": why for name, why in errors.items()})
    dense = [name for name in models if name not in QUANTIZED]
    prefill = {name: prefill_tokens_per_s(m, prefill_tokens) for name, m in models.items()}
    out["prefill_tokens_per_s"] = {name: prefill[name] for name in dense}
    decode = {name: {str(n): decode_throughput(m, n) for n in sessions}
              for name, m in models.items()}
    one, most = str(min(sessions)), max(sessions)
    best_dense = max(dense, key=lambda name: decode[name][one])
    fastest = max(decode, key=lambda name: decode[name][one])
    fast = models[fastest]
    ruled = models[max((name for name, m in models.items() if m.native is None),
                       key=lambda name: decode[name][one])]
    per_token = {name: bytes_per_token(m) for name, m in models.items()}
    roofline = {name: roofline_fraction(per_token[name], decode[name][one], read_gbps)
                for name in models}
    formats = {"dense": best_dense, **{f: f for f in weights if f in models}}
    out.update({
        "decode_dtype": _name(fast.dtype), "decode_weights": fast.weights,
        "decode_tokens_per_s": decode[fastest],
        "decode_tokens_per_s_by_dtype": {name: decode[name] for name in dense},
        "decode_tokens_per_s_by_weights": {f: decode[v] for f, v in formats.items()},
        "prefill_tokens_per_s_by_weights": {f: prefill[v] for f, v in formats.items()},
        "decode_bytes_per_token": per_token[fastest],
        "decode_bytes_per_token_by_weights": {f: per_token[v] for f, v in formats.items()},
        "decode_roofline_fraction": roofline[fastest],
        # against one core's bandwidth: a batch-1 step of the layers' torch ops runs on one
        # thread (step_threads.py); a native one (q4) on all, so both bound it
        "decode_roofline_fraction_one_thread": roofline_fraction(
            per_token[fastest], decode[fastest][one], one_core),
        "decode_roofline_fraction_by_weights": {f: roofline[v] for f, v in formats.items()},
        "decode_step_breakdown_ms": {str(n): decode_step_breakdown(fast, n)
                                     for n in sorted({min(sessions), most})},
        # the rule binds the layers' forward only (a native one runs on all threads): its
        # fastest format at batch 1
        "decode_small_step_threads_weights": ruled.weights,
        "decode_small_step_threads": small_step_threads_ab(ruled, sorted({min(sessions), most}))})
    return out


def small_step_threads_ab(model, sessions) -> dict:
    """Decode tokens/s with a small step on one thread (the engine's rule, step_threads.py) and
    on all, back to back for each batch size, so the two share the machine's state."""
    return {str(n): {"one_thread": decode_throughput(model, n, small_step_threads=1),
                     "all_threads": decode_throughput(model, n, small_step_threads=0)}
            for n in sessions}
