"""Tensor choice: tensor 6 for MHA (OPT-13B at ~51 vs ~30.5 GFLOP/MB), K/V for GQA models."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from compute_worker.tensor_choice import KV, TENSOR6, choose_tensor, tensor_costs

OPT_13B = dict(arch="opt", num_layers=40, hidden_size=5120, num_heads=40, num_kv_heads=40,
               head_dim=128, intermediate_size=20480)
LLAMA3_8B = dict(arch="llama", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8,
                 head_dim=128, intermediate_size=14336)
QWEN25_7B = dict(arch="llama", num_layers=28, hidden_size=3584, num_heads=28, num_kv_heads=4,
                 head_dim=128, intermediate_size=18944)
QWEN25_05B = dict(arch="llama", num_layers=24, hidden_size=896, num_heads=14, num_kv_heads=2,
                  head_dim=64, intermediate_size=4864)


def test_opt13b_stores_tensor6_with_the_papers_figures():
    c = tensor_costs(OPT_13B)
    assert c.tensor == TENSOR6
    assert c.kv.bytes_per_token == 819200          # 800 KiB, the traces README's figure
    assert c.tensor6.bytes_per_token == 409600     # half
    assert c.tensor6.gflop_per_mb == pytest.approx(51.0, rel=0.01)
    assert c.kv.gflop_per_mb == pytest.approx(30.5, rel=0.015)
    # restoring K/V from tensor 6 costs exactly the K and V projections
    assert c.tensor6.restore_flops_per_token == pytest.approx(40 * 4 * 5120 * 5120)


@pytest.mark.parametrize("cfg", [LLAMA3_8B, QWEN25_7B, QWEN25_05B])
def test_gqa_models_store_kv(cfg):
    c = tensor_costs(cfg)
    assert c.tensor == KV
    assert c.kv.bytes_per_token < c.tensor6.bytes_per_token
    assert c.kv.gflop_per_mb > c.tensor6.gflop_per_mb


def test_accepts_objects_and_other_dtypes():
    obj = SimpleNamespace(**OPT_13B, vocab_size=50272)
    assert choose_tensor(obj) == TENSOR6
    assert tensor_costs(obj, dtype_bytes=1).kv.bytes_per_token == 409600


def test_accepts_the_model_config_class():
    config = pytest.importorskip("compute_worker.models.config")
    mc = config.ModelConfig(vocab_size=50272, max_position=2048, **OPT_13B)
    assert choose_tensor(mc) == TENSOR6


def test_rejects_incomplete_or_unknown_configs():
    with pytest.raises(ValueError):
        tensor_costs({k: v for k, v in OPT_13B.items() if k != "head_dim"})
    with pytest.raises(ValueError):
        tensor_costs({**OPT_13B, "arch": "mamba"})
