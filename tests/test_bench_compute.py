"""`bidaw bench compute`'s engine figures: the roofline arithmetic and the profile split on hand
numbers, and every measurement once on a tiny random-weight model (seconds, no download)."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from bench.compute.decode import MEAN_CONTEXT, decode_weight_bytes
from bench.compute.dtypes import cast_copy, prefill_tokens_per_s
from bench.compute.figures import engine_figures
from bench.compute.profile import ATTENTION, NATIVE_LAYERS, SAMPLING, STEP, split_step_times
from bench.compute.random_models import random_model
from bench.compute.llamacpp import ENV, binary_from, measure, parse_results, smollm2_gguf
from bench.compute.reference import QUOTED, versus_llamacpp
from bench.compute.roofline import decode_bytes_per_token, gbps, roofline_fraction
from compute_worker.models.prepare import prepare_model

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
                                   "native_layers": 0.0, "other_ops": 1.0,
                                   "python_overhead": 1.5, "step": 10.0})
    native = _ev(STEP, 10_000)  # a q4 step: its layers in one native call, then the head
    parts = split_step_times([native, _ev(NATIVE_LAYERS, 6_000, native),
                              _ev("bidaw_native::q8_linear", 2_000, native)], steps=1)
    assert parts["native_layers"] == 6.0 and parts["matmuls"] == 2.0
    assert parts["python_overhead"] == 2.0


def test_weight_bytes_count_what_a_decode_step_reads():
    tied, untied = random_model(TINY), random_model({**TINY, "tie_word_embeddings": False})
    assert decode_weight_bytes(untied) == decode_weight_bytes(tied)  # one table read in full
    dense = decode_weight_bytes(tied)
    for fmt, layer_bytes in (("int8", 1.0), ("int4", 0.5 + 4 / 32), ("q4", 0.5 + 4 / 32)):
        # + int4's bfloat16 scale and zero, q4's float16 scale and min, per group of 32
        quantized = random_model(TINY)
        prepare_model(quantized, fmt)
        layers = 2 * 64 * (128 + 64 + 256 + 128)  # qkv, o, gate|up, down
        norms = (2 * 2 + 1) * 64 * 4
        # int8 output projection and its scales: bfloat16 (torch's kernel), float32 (q4's)
        head = 256 * 64 + 256 * (4 if fmt == "q4" else 2)
        scales = 0 if fmt != "int8" else 2 * (128 + 64 + 256 + 64) * 2
        assert decode_weight_bytes(quantized) == layers * layer_bytes + scales + norms + head
        assert decode_weight_bytes(quantized) < dense / 3


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
    assert set(out["prefill_tokens_per_s_by_weights"]) == {"dense", "bf16", "int8", "int4", "q4"}
    assert all(v > 0 for v in out["prefill_tokens_per_s"].values())
    by_dtype, by_weights = out["decode_tokens_per_s_by_dtype"], out["decode_tokens_per_s_by_weights"]
    assert set(by_weights) == {"dense", "bf16", "int8", "int4", "q4"}
    assert by_weights["dense"]["1"] == max(d["1"] for d in by_dtype.values())
    fastest = out["decode_weights"]
    assert out["decode_tokens_per_s"] == by_weights[fastest]
    assert by_weights[fastest]["1"] == max(d["1"] for d in by_weights.values())
    model = random_model(TINY)
    if fastest != "dense":
        prepare_model(model, fastest)
        assert out["decode_dtype"] == "float32"  # weight-only: the model dtype stays
    size = 4 if out["decode_dtype"] == "float32" else 2
    # dense: the float32 model's bytes, halved when its bfloat16 copy decoded faster
    weights = decode_weight_bytes(model) * (size / 4 if fastest == "dense" else 1)
    per_token = weights + 2 * 2 * 2 * 16 * size * MEAN_CONTEXT
    assert out["decode_bytes_per_token"] == pytest.approx(per_token)
    assert out["decode_bytes_per_token_by_weights"][fastest] == out["decode_bytes_per_token"]
    assert out["decode_roofline_fraction"] == pytest.approx(
        per_token * by_weights[fastest]["1"] / (out["memory_read_gbps"] * 1e9))
    assert out["decode_roofline_fraction_by_weights"][fastest] == out["decode_roofline_fraction"]
    assert out["decode_roofline_fraction_one_thread"] == pytest.approx(
        per_token * by_weights[fastest]["1"] / (out["memory_read_gbps_one_thread"] * 1e9))
    assert set(out["decode_step_breakdown_ms"]) == {"1", "2"}
    assert all(p["step_unprofiled"] > 0 for p in out["decode_step_breakdown_ms"].values())
    for parts in out["decode_step_breakdown_ms"].values():
        # a q4 step runs its layers (attention included) in the native call, its head outside
        layers = parts["native_layers"] if fastest == "q4" else parts["attention"]
        assert layers > 0 and parts["matmuls"] > 0 and parts["sampling"] > 0
        assert parts["python_overhead"] >= 0  # no op counted twice
    ab = out["decode_small_step_threads"]
    assert set(ab) == {"1", "2"}
    # measured where the rule binds: a format of the layers' forward, never the native one
    assert out["decode_small_step_threads_weights"] in {"dense", "bf16", "int8", "int4"}
    assert all(v["one_thread"] > 0 and v["all_threads"] > 0 for v in ab.values())
    assert not [k for k in out if k.endswith("_error")]


def test_llamacpp_reference_is_quoted_with_its_source():
    out = versus_llamacpp(79.2, 406.0)
    assert out["decode_vs_llamacpp"] == pytest.approx(0.8)
    assert out["prefill_vs_llamacpp"] == pytest.approx(2.0)
    assert "not measured in this run" in out["llamacpp_reference"]["source"]
    assert "llamacpp_quoted" not in out


def test_measured_llamacpp_figures_replace_the_quoted_ones():
    measured = {"decode_tokens_per_s": 50.0, "prefill_tokens_per_s": 100.0,
                "source": "measured in this run: llama-bench ..."}
    out = versus_llamacpp(40.0, 300.0, measured)
    assert out["llamacpp_reference"] is measured
    assert out["decode_vs_llamacpp"] == pytest.approx(0.8)
    assert out["prefill_vs_llamacpp"] == pytest.approx(3.0)
    assert out["llamacpp_quoted"] == QUOTED


# llama-bench -o json's shape (fields it prints beside these are left out)
LLAMA_BENCH_JSON = json.dumps([
    {"model_type": "llama ?B Q4_1", "n_threads": 1, "n_prompt": 1000, "n_gen": 0,
     "avg_ts": 300.0, "stddev_ts": 3.0},
    {"model_type": "llama ?B Q4_1", "n_threads": 1, "n_prompt": 0, "n_gen": 32,
     "avg_ts": 101.25, "stddev_ts": 1.0},
    {"model_type": "llama ?B Q4_1", "n_threads": 2, "n_prompt": 1000, "n_gen": 0,
     "avg_ts": 512.5, "stddev_ts": 3.0},
    {"model_type": "llama ?B Q4_1", "n_threads": 2, "n_prompt": 0, "n_gen": 32,
     "avg_ts": 90.0, "stddev_ts": 1.0}])


def test_llama_bench_json_parses_into_each_tests_best_thread_count():
    assert parse_results(LLAMA_BENCH_JSON) == {
        "prefill_tokens_per_s": 512.5, "prefill_tokens_threads": 2,
        "decode_tokens_per_s": 101.25, "decode_tokens_threads": 1}
    with pytest.raises(ValueError, match="decode_tokens_per_s"):
        parse_results(json.dumps(json.loads(LLAMA_BENCH_JSON)[:1]))


def test_llama_bench_runs_on_our_gguf_on_one_thread_and_ours(tmp_path, monkeypatch):
    fake = tmp_path / "llama-bench"  # prints its argv to a file and the JSON above
    argv = tmp_path / "argv"
    fake.write_text(f"#!/bin/sh\necho \"$@\" > {argv}\ncat <<'EOF'\n{LLAMA_BENCH_JSON}\nEOF\n")
    fake.chmod(0o755)
    out = measure(str(fake), threads=2, prompt=1000, gen=32, repeat=3)
    assert out["decode_tokens_per_s"] == 101.25 and out["prefill_tokens_per_s"] == 512.5
    args = argv.read_text().split()
    assert args[args.index("-m") + 1] == str(smollm2_gguf())
    assert args[args.index("-t") + 1] == "1,2" and args[args.index("-p") + 1] == "1000"
    assert out["source"].startswith("measured in this run: " + str(fake))
    monkeypatch.setenv(ENV, "/opt/llama-bench")
    assert binary_from(None) == "/opt/llama-bench" and binary_from("x") == "x"
    monkeypatch.delenv(ENV)
    assert binary_from(None, built=tmp_path / "not-built") is None  # quoted figures
    assert binary_from(None, built=fake) == str(fake)  # what `make llama-bench` built


def test_one_threads_bandwidth_is_measured_on_one_thread_and_the_count_restored():
    from bench.compute.bandwidth import memory_read_gbps

    before = torch.get_num_threads()
    seen = []
    sum_ = torch.Tensor.sum
    torch.Tensor.sum = lambda self, *a, **k: seen.append(torch.get_num_threads()) or sum_(self, *a, **k)
    try:
        assert memory_read_gbps(1 << 22, threads=1) > 0
    finally:
        torch.Tensor.sum = sum_
    assert seen == [1] * 5 and torch.get_num_threads() == before
