"""bf16 weights in a float32 model (models/quant.Bf16Linear, `--weights bf16`): close to dense,
answers from restored KV equal to recompute in two short
seeded conversations with the real model, and only ever an explicit choice."""
from __future__ import annotations

import copy

import pytest
import torch

from bench.exactness import local_store, run_exactness
from compute_worker.loaders.dtype_choice import choose_dtype
from compute_worker.models.prepare import prepare_model, resolve_weights
from compute_worker.models.quant import Bf16Linear
from tests.test_kv_dtype import SAPPHIRE_RAPIDS


def test_a_bf16_linear_is_dense_within_bf16_rounding():
    gen = torch.Generator().manual_seed(3)
    w, b = torch.randn(96, 64, generator=gen), torch.randn(96, generator=gen)
    x = torch.randn(5, 64, generator=gen)
    layer = Bf16Linear(w, b)
    y, want = layer(x), torch.nn.functional.linear(x, w, b)
    assert layer.weight.dtype == torch.bfloat16 and y.dtype == torch.float32
    err = (y - want).abs().max() / want.std()
    # inputs, weights and output each round to 8 bits of mantissa: ~1% of the spread at most
    assert 0 < err < 0.03, err


def test_bf16_weights_are_asked_for_never_picked_by_auto():
    # auto never picks bf16 weights; on a CPU with AMX it picks float32 or, where its linears
    # are row-invariant, bf16 throughout (docs/engine.md)
    assert choose_dtype("auto", "cpu", SAPPHIRE_RAPIDS).dtype == torch.float32
    assert resolve_weights("auto", "cpu", "AVX512")[0] == "q4"
    assert resolve_weights("bf16", "cpu") == ("bf16", "asked for")
    assert resolve_weights("bf16", "cuda") == ("bf16", "asked for")  # a plain matmul anywhere


def test_bf16_weights_need_a_float32_model(smollm_bf16):
    model = copy.deepcopy(smollm_bf16[0])
    with pytest.raises(ValueError, match="for a float32 model"):
        prepare_model(model, "bf16")


def test_restored_kv_answers_equal_recompute_with_bf16_weights(smollm):
    base, tok = smollm
    model = copy.deepcopy(base)
    assert prepare_model(model, "bf16") == ("bf16", "asked for")
    assert isinstance(model.layers[0].down_proj, Bf16Linear)
    with local_store() as store:
        report = run_exactness(model, tok, store, conversations=2, turns=2, max_tokens=8)
    assert report.weights == "bf16" and report.dtype == "float32"
    assert report.restored_tokens > 0  # turn 2 did restore turn 1's KV
    assert report.matched == 2, report.divergences
