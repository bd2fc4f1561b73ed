"""Where a decode step's time goes, from torch.profiler over a few steps run as the engine runs
them (one packed forward, then one Sampler call per sequence).

Attention is labelled by wrapping the models' `packed_attention` for the profile: it holds the
per-sequence loop, the KV append and the SDPA kernel. Python overhead is what the step's wall
time leaves outside every op (module calls, packing, the loop between ops), profiler overhead
included, so the parts are rough shares; `step_unprofiled` is the same steps' time without it.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.compute.random_models import random_ids
from compute_worker.models import llama, opt
from compute_worker.sampling import Sampler

STEP, ATTENTION, SAMPLING = "bench.decode_step", "bench.attention", "bench.sampling"
MATMULS = {"aten::linear", "aten::matmul", "aten::mm", "aten::addmm", "aten::bmm",
           "aten::_weight_int8pack_mm", "aten::_weight_int4pack_mm_for_cpu",  # quant.py's
           "bidaw_native::q4_linear", "bidaw_native::q8_linear"}  # native_linear.py's
NATIVE_LAYERS = "bidaw_native::llama_forward"  # every layer of a q4 step in one call


def split_step_times(events, steps: int) -> dict[str, float]:
    """Profiler events (name, cpu_time_total in µs, cpu_parent) -> ms per step in each part:
    the step's direct children sorted into matmuls / attention / sampling / native_layers (the
    native decode step's one call: its layers' matmuls, attention and the rest) / other ops,
    and the rest of the step's time as python_overhead."""
    parts = dict.fromkeys(("matmuls", "attention", "sampling", "native_layers", "other_ops"), 0.0)
    total = 0.0
    for ev in events:
        if ev.name == STEP:
            total += ev.cpu_time_total
        elif ev.cpu_parent is not None and ev.cpu_parent.name == STEP:
            part = {ATTENTION: "attention", SAMPLING: "sampling",
                    NATIVE_LAYERS: "native_layers"}.get(
                ev.name, "matmuls" if ev.name in MATMULS else "other_ops")
            parts[part] += ev.cpu_time_total
    parts["python_overhead"] = total - sum(parts.values())
    parts["step"] = total
    return {k: v / 1000 / steps for k, v in parts.items()}


def _labelled(fn):
    def attention(*args, **kwargs):
        with record_function(ATTENTION):
            return fn(*args, **kwargs)
    return attention


def decode_step_breakdown(model, batch: int, steps: int = 5, prompt: int = 16) -> dict[str, float]:
    """ms per decode step of `batch` sequences with `prompt`-token contexts, by part. The steps
    run on a thread of their own, as the engine's do (on a CPU the main thread's idle OpenMP
    workers change a step's time)."""
    with ThreadPoolExecutor(1, thread_name_prefix="bench-decode-steps") as pool:
        return pool.submit(_profiled_steps, model, batch, steps, prompt).result()


def _profiled_steps(model, batch: int, steps: int, prompt: int) -> dict[str, float]:
    gen = torch.Generator().manual_seed(11)
    caches = [model.new_cache(prompt + 2 * steps + 2) for _ in range(batch)]
    samplers = [Sampler() for _ in range(batch)]
    first = [(torch.tensor(random_ids(model.config.vocab_size, prompt, gen)), c) for c in caches]
    outs = model.forward(first, logits_last_only=True)
    tokens = [s(o.logits[-1]) for s, o in zip(samplers, outs)]

    def step():
        with record_function(STEP):
            outs = model.forward([(torch.tensor([t]), c) for t, c in zip(tokens, caches)],
                                 logits_last_only=True)
            with record_function(SAMPLING):
                tokens[:] = [s(o.logits[-1]) for s, o in zip(samplers, outs)]

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    unprofiled_ms = (time.perf_counter() - start) * 1000 / steps
    wrapped = _labelled(llama.packed_attention)  # the one both layers import
    with mock.patch.object(llama, "packed_attention", wrapped), \
            mock.patch.object(opt, "packed_attention", wrapped), \
            profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return {**split_step_times(prof.events(), steps), "step_unprofiled": unprofiled_ms}
