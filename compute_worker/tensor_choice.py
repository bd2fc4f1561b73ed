"""Which history tensor to store per token: K/V, or tensor 6 (the normalised hidden state that
feeds a layer's Q/K/V projections). Chosen from the model config, never by hand.

Storing a tensor for the history tokens saves recomputing everything that produced it:
- K/V of every layer saves the whole forward pass of the history tokens;
- tensor 6 of every layer saves the same minus the K and V projections, which the compute worker
  redoes (K = W_k·h + b_k, V = W_v·h + b_v, then RoPE) when it restores the KV.
The figure of merit is compute saved per byte stored (GFLOP per MB, MB = 10^6 bytes); matmul
FLOPs only (2 per multiply-add), attention scores, norms and biases left out as second order.
For OPT-13B (MHA) that is 51.2 GFLOP/MB for tensor 6 vs 30.7 for K/V (the paper: 51.0 vs 30.5);
for GQA models K/V is already smaller than the hidden state and wins.

Accepts a plain dict or any object with the fields num_layers, hidden_size, num_heads,
num_kv_heads, head_dim, intermediate_size and arch ("opt": 2-matrix MLP, "llama": gated 3-matrix).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

KV = "kv"
TENSOR6 = "tensor6"

_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim",
           "intermediate_size", "arch")


@dataclass(frozen=True)
class TensorCost:
    tensor: str                  # KV or TENSOR6
    bytes_per_token: int         # stored bytes per history token, all layers
    flops_saved_per_token: float  # forward FLOPs not redone per history token, all layers
    restore_flops_per_token: float  # FLOPs to turn the stored tensor back into K/V

    @property
    def gflop_per_mb(self) -> float:
        return self.flops_saved_per_token / 1e9 / (self.bytes_per_token / 1e6)


@dataclass(frozen=True)
class TensorChoice:
    chosen: TensorCost
    kv: TensorCost
    tensor6: TensorCost

    @property
    def tensor(self) -> str:
        return self.chosen.tensor


def _fields(config: Any) -> dict[str, Any]:
    get = config.get if isinstance(config, Mapping) else lambda k: getattr(config, k, None)
    values = {k: get(k) for k in _FIELDS}
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise ValueError(f"model config lacks {', '.join(missing)}")
    if values["arch"] not in ("opt", "llama"):
        raise ValueError(f"unknown arch {values['arch']!r} (expected 'opt' or 'llama')")
    return values


def layer_flops_per_token(config: Any) -> dict[str, float]:
    """Matmul FLOPs of one decoder layer for one token, by part."""
    c = _fields(config)
    h, kv_dim = c["hidden_size"], c["num_kv_heads"] * c["head_dim"]
    q_dim = c["num_heads"] * c["head_dim"]
    mlp_mats = 2 if c["arch"] == "opt" else 3  # OPT: fc1, fc2; Llama: gate, up, down
    return {
        "q": 2.0 * h * q_dim,
        "kv": 2.0 * 2 * h * kv_dim,
        "o": 2.0 * q_dim * h,
        "mlp": 2.0 * mlp_mats * h * c["intermediate_size"],
    }


def tensor_costs(config: Any, dtype_bytes: int = 2) -> TensorChoice:
    """Both candidates' costs and the better one (more compute saved per byte; ties: K/V)."""
    c = _fields(config)
    layers = c["num_layers"]
    parts = layer_flops_per_token(config)
    full = layers * sum(parts.values())
    kv_proj = layers * parts["kv"]
    kv = TensorCost(KV, layers * 2 * c["num_kv_heads"] * c["head_dim"] * dtype_bytes, full, 0.0)
    t6 = TensorCost(TENSOR6, layers * c["hidden_size"] * dtype_bytes, full - kv_proj, kv_proj)
    chosen = t6 if t6.gflop_per_mb > kv.gflop_per_mb else kv
    return TensorChoice(chosen, kv, t6)


def choose_tensor(config: Any, dtype_bytes: int = 2) -> str:
    """"tensor6" or "kv" for this model."""
    return tensor_costs(config, dtype_bytes).tensor
