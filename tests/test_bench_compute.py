"""`bidaw bench compute`'s engine figures: the roofline arithmetic and the profile split on hand
numbers, and every measurement once on a tiny random-weight model (seconds, no download)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bench.compute.decode import MEAN_CONTEXT, weight_bytes
from bench.compute.dtypes import cast_copy, prefill_tokens_per_s
from bench.compute.figures import engine_figures
from bench.compute.profile import ATTENTION, SAMPLING, STEP, split_step_times
from bench.compute.random_models import random_model
from bench.compute.roofline import decode_bytes_per_token, gbps, roofline_fraction

TINY = dict(arch="llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
            num_heads=4, num_kv_heads=2, head_dim=16, max_position=512,
            tie_word_embeddings=True, name="tiny-llama-random")


def test_roofline_arithmetic_on_hand_numbers():
    # SmolLM2-135M in float32: 540 MB of weights, 46,080 B of K/V per token, 32-token context.
    per_token = decode_bytes_per_token(540_000_000, 46_080, 32)
    assert per_token == 540_000_000 + 1_474_560
    assert roofline_fraction(per_token, 24, 18.0) == pytest.approx(541_474_560 * 24 / 18e9)
    assert roofline_fraction(1e9, 9, 18.0) == pytest.approx(0.5)
    assert gbps(3e9, 0.5) == 6.0
    with pytest.raises(ValueError, match="bandwidth"):
        roofline_fraction(1e9, 1, 0)
    with pytest.raises(ValueError, match="seconds"):
        gbps(1, 0)


def _ev(name, us, parent=None):
    return SimpleNamespace(name=name, cpu_time_total=us, cpu_parent=parent)


def test_profile_split_sorts_the_steps_children_and_leaves_python_the_rest():
    events = []
    for _ in range(2):  # two steps of 10 ms each
        step = _ev(STEP, 10_000)
        attn = _ev(ATTENTION, 3_000, step)
        events += [step, _ev("aten::linear", 4_000, step), _ev("aten::addmm", 3_900, None),
                   attn, _ev("aten::scaled_dot_product_attention", 2_000, attn),
                   _ev(SAMPLING, 500, step), _ev("aten::argmax", 400, None),
                   _ev("aten::rms_norm", 1_000, step)]
    parts = split_step_times(events, steps=2)
    assert parts == pytest.approx({"matmuls": 4.0, "attention": 3.0, "sampling": 0.5,
                                   "other_ops": 1.0, "python_overhead": 1.5, "step": 10.0})


def test_weight_bytes_count_tied_embeddings_once():
    tied, untied = random_model(TINY), random_model({**TINY, "tie_word_embeddings": False})
    assert weight_bytes(untied) - weight_bytes(tied) == 256 * 64 * 4


def test_cast_copy_leaves_the_model_and_says_why_a_dtype_cannot_run():
    model = random_model(TINY)
    bf16, why = cast_copy(model, torch.bfloat16)
    assert why == "" and bf16.dtype == torch.bfloat16 and model.dtype == torch.float32
    assert bf16.new_cache().dtype == torch.bfloat16
    none, why = cast_copy(model, torch.int8)
    assert none is None and why.startswith("TypeError")


def test_prefill_runs_the_whole_prompt_in_engine_chunks():
    model = random_model(TINY)
    calls = []
    forward = model.forward
    model.forward = lambda batch, **kw: calls.append(len(batch[0][0])) or forward(batch, **kw)
    assert prefill_tokens_per_s(model, tokens=100, repeat=1, chunk=64) > 0
    assert calls == [32, 64, 36]  # warm-up, then 100 tokens in two chunks


def test_engine_figures_on_a_tiny_model_give_every_key_consistently():
    out = engine_figures(random_model(TINY), sessions=(1, 2), prefill_tokens=64,
                         read_bytes=1 << 22)
    assert set(out["prefill_tokens_per_s"]) == {"float32", "bfloat16"}
    assert all(v > 0 for v in out["prefill_tokens_per_s"].values())
    by_dtype = out["decode_tokens_per_s_by_dtype"]
    dtype = out["decode_dtype"]
    assert out["decode_tokens_per_s"] == by_dtype[dtype]
    assert by_dtype[dtype]["1"] == max(d["1"] for d in by_dtype.values())
    size = 4 if dtype == "float32" else 2
    per_token = weight_bytes(random_model(TINY)) * size // 4 + 2 * 2 * 2 * 16 * size * MEAN_CONTEXT
    assert out["decode_bytes_per_token"] == per_token
    assert out["decode_roofline_fraction"] == pytest.approx(
        per_token * by_dtype[dtype]["1"] / (out["memory_read_gbps"] * 1e9))
    assert set(out["decode_step_breakdown_ms"]) == {"1", "2"}
    assert all(p["step_unprofiled"] > 0 for p in out["decode_step_breakdown_ms"].values())
    for parts in out["decode_step_breakdown_ms"].values():
        assert parts["attention"] > 0 and parts["matmuls"] > 0 and parts["sampling"] > 0
        assert parts["python_overhead"] >= 0  # no op counted twice
    assert "float32_error" not in out and "bfloat16_error" not in out
