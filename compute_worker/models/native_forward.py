"""A q4 Llama's layers in one native call (compute_worker/native/llama_forward.cpp).

`NativeForward.build(model)` returns the call for a model it can run (Llama family, float32,
every layer's linears Q4Linear, SiLU, on the CPU) and None for any other, which keeps the layers'
forward. It runs every batch of such a model, prefill chunks and decodes alike, each row alone:
a row's bits depend on its own tokens and cache only, so a prefix prefilled in one pass has the
bits of one computed token by token, and q4 needs no aligned KV blocks (kv_blocks.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from compute_worker.models.kv_cache import KVCache
from compute_worker.models.native_linear import Q4Linear

_NO_BIAS = torch.empty(0)


def _linear(module) -> list[torch.Tensor]:
    bias = _NO_BIAS if module.bias is None else module.bias.detach().float().contiguous()
    return [module.qweight, module.scale_min, bias]


class NativeForward:
    def __init__(self, weights: list[torch.Tensor], heads: int, kv_heads: int, eps: float) -> None:
        self.weights, self.heads, self.kv_heads, self.eps = weights, heads, kv_heads, eps

    @classmethod
    def build(cls, model) -> "NativeForward | None":
        from compute_worker.models.llama import LlamaLayer

        layers = list(model.layers)
        if (model.device.type != "cpu" or model.dtype != torch.float32
                or not all(isinstance(layer, LlamaLayer) for layer in layers)):
            return None
        if not all(isinstance(m, Q4Linear) for layer in layers
                   for m in (layer.qkv, layer.o_proj, layer.gate_up, layer.down_proj)):
            return None
        if any(layer.act is not F.silu for layer in layers):
            return None
        weights = []
        for layer in layers:
            weights += [layer.attn_norm.weight.detach(), *_linear(layer.qkv),
                        *_linear(layer.o_proj), layer.mlp_norm.weight.detach(),
                        *_linear(layer.gate_up), *_linear(layer.down_proj)]
        first = layers[0]
        return cls(weights, first.nh, first.nkv, first.attn_norm.eps)

    def __call__(self, x: torch.Tensor, caches: list[KVCache], counts: list[int],
                 cos: torch.Tensor, signed_sin: torch.Tensor, want_hidden6: bool):
        """x [N, hidden]: counts[s] new tokens for caches[s], sequence after sequence, at its
        length on. Appends their K/V to the caches; returns the last layer's output and tensor
        6 [N, L, hidden] (or None)."""
        for cache, n in zip(caches, counts):
            cache.reserve(n)
        x, h6 = torch.ops.bidaw_native.llama_forward(
            x.contiguous(), [c.data for c in caches], [c.length for c in caches], counts,
            cos.contiguous(), signed_sin.contiguous(), self.weights, self.heads, self.kv_heads,
            self.eps, want_hidden6)
        for cache, n in zip(caches, counts):
            cache.length += n
        return x, (h6 if want_hidden6 else None)
