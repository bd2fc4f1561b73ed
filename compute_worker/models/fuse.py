"""A loaded model's projections that read the same input, fused into one matmul each.

A decode step at batch 1 pays a fixed cost per op on top of the bytes it reads (about half of
an int4 step here is not matmul time): one [N, q+k+v] matmul in place of three and one
[N, 2 x intermediate] for gate|up save three op dispatches per layer and read the same bytes. A fused output's columns are the separate outputs bit for bit (MKL
computes each column the same whatever the number of weight rows; tests/test_quant.py checks the
logits), so KV computed before and after fusing is interchangeable.

Run after loading: the loaders fill the separate projections by their checkpoint names.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker.models.base import CausalLM

QKV = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


def concat_linears(parts: list[nn.Linear]) -> nn.Linear:
    """One Linear whose output is the parts' outputs side by side."""
    w = parts[0].weight
    # built on meta, so no random init is drawn (~0.8 s a SmolLM2 load) for weights replaced next
    fused = nn.Linear(w.shape[1], sum(p.weight.shape[0] for p in parts),
                      bias=parts[0].bias is not None, device="meta", dtype=w.dtype)
    with torch.no_grad():
        fused.weight = nn.Parameter(torch.cat([p.weight for p in parts]))
        if fused.bias is not None:
            fused.bias = nn.Parameter(torch.cat([p.bias for p in parts]))
    return fused


def rows_from(module: nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
    """module(x)[:, start:], the same bits, reading only those rows of a dense weight (tensor 6
    -> K/V needs k and v, not q); a quantized module runs whole."""
    if isinstance(module, nn.Linear):
        bias = None if module.bias is None else module.bias[start:]
        return F.linear(x, module.weight[start:], bias)
    return module(x)[:, start:]


def _fuse(layer: nn.Module, names: tuple[str, ...], into: str) -> None:
    if getattr(layer, into) is not None or not all(hasattr(layer, n) for n in names):
        return  # fused already, or an architecture without these projections
    setattr(layer, into, concat_linears([getattr(layer, n) for n in names]))
    for n in names:
        delattr(layer, n)


def fuse_projections(model: CausalLM) -> CausalLM:
    """Fuse every layer's q/k/v (and gate/up where there are) in place; returns the model."""
    for layer in model.layers:
        _fuse(layer, QKV, "qkv")
        if hasattr(layer, "gate_up"):
            _fuse(layer, GATE_UP, "gate_up")
    return model
