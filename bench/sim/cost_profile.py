"""Hardware/model cost profiles (YAML under bench/profiles/) and the roofline times they imply.

A profile names a model config (the fields compute_worker.tensor_choice reads), GPU figures,
host tiers and KV limits. `load_profile("opt13b-a800", overrides={"host.dram_gib": 120})` gives
a `CostModel`: byte sizes from the model config, and step times from a roofline —
prefill compute-bound (FLOPs / achieved FLOP/s, overlapped layer by layer with the DRAM→GPU copy
of the history), decode memory-bound (weights + the batch's KV read once per step).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from compute_worker.tensor_choice import KV, TENSOR6, TensorChoice, layer_flops_per_token, tensor_costs
from scheduler.policy import PrefillCost

GIB = 1 << 30
PROFILE_DIR = Path(__file__).parents[1] / "profiles"  # bench/profiles


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """Override one field; ValueError naming it for a field the profile lacks or a value not of
    the field's type (a string, a list, a negative or infinite number where a size goes)."""
    *parents, leaf = dotted.split(".")
    node = tree
    for p in parents:
        if p not in node or not isinstance(node[p], dict):
            raise ValueError(f"profile has no section {p!r} (in {dotted!r})")
        node = node[p]
    if leaf not in node:
        raise ValueError(f"profile has no field {dotted!r}")
    if isinstance(node[leaf], dict):
        raise ValueError(f"{dotted!r} is a section; set one of its fields: "
                         f"{', '.join(f'{dotted}.{k}' for k in node[leaf])}")
    node[leaf] = _typed_like(node[leaf], value, dotted)


def _typed_like(current: Any, value: Any, dotted: str) -> Any:
    """`value` (a --set string, read as YAML) as the type of the profile's `current` value."""
    if isinstance(value, str):
        try:
            value = yaml.safe_load(value)
        except (yaml.YAMLError, RecursionError):
            raise ValueError(f"{dotted}: not a YAML value") from None
    if current is None:
        return value
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ValueError(f"{dotted}: want true or false, got {value!r}")
        return value
    if isinstance(current, (int, float)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0:
            raise ValueError(f"{dotted}: want a finite number >= 0, got {value!r}")
        if isinstance(current, float) or float(value).is_integer():
            return type(current)(value)
        if _is_count(dotted):  # int() would cut it (max_batch 1.5 -> 1)
            raise ValueError(f"{dotted}: want a whole number, got {value!r}")
        return float(value)  # a size or rate the YAML happens to write whole (watermark_gib: 2)
    if not isinstance(value, type(current)):
        raise ValueError(f"{dotted}: want {type(current).__name__}, got {value!r}")
    return value


def _is_count(dotted: str) -> bool:
    leaf = dotted.rsplit(".", 1)[-1]
    return leaf.startswith(("max_", "num_")) or leaf.endswith(("_size", "_dim", "_bytes"))


def load_profile_dict(name_or_path: str, overrides: dict[str, Any] | None = None) -> dict:
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        raise FileNotFoundError(f"no profile {name_or_path!r}; known: {', '.join(profile_names())}")
    tree = yaml.safe_load(path.read_text())
    tree = copy.deepcopy(tree)
    for k, v in (overrides or {}).items():
        _set_dotted(tree, k, v)
    return tree


@dataclass
class CostModel:
    name: str
    tensors: TensorChoice
    kv_bytes_per_token: int          # K/V, what the GPU holds while a request runs
    forward_flops_per_token: float   # matmuls of all layers
    attn_flops_per_token_key: float  # scores + weighted sum, all layers, per (query, key) pair
    weight_bytes: float
    prefill_flops_per_s: float
    decode_bytes_per_s: float
    iteration_overhead_s: float
    gpu_kv_bytes: int
    max_batch: int
    max_prefill_tokens: int
    pcie_bytes_per_s: float
    dram_bytes: int
    watermark_bytes: int
    ssd_bytes: int
    ssd_bytes_per_s: float
    max_concurrent_loads: int
    max_kv_tokens: int

    def stored_bytes_per_token(self, tensor: str) -> int:
        return {KV: self.tensors.kv, TENSOR6: self.tensors.tensor6}[tensor].bytes_per_token

    def restore_flops_per_token(self, tensor: str) -> float:
        return self.tensors.tensor6.restore_flops_per_token if tensor == TENSOR6 else 0.0

    def prefill_flops(self, new_tokens: int, context_tokens: int) -> float:
        """Forward FLOPs of `new_tokens` that attend to `context_tokens` earlier ones (causal)."""
        keys = new_tokens * context_tokens + new_tokens * (new_tokens + 1) / 2
        return new_tokens * self.forward_flops_per_token + keys * self.attn_flops_per_token_key

    def prefill_step_time(self, flops: float, pcie_bytes: float) -> float:
        """One prefill step: compute (incl. tensor-6 restore) overlapped with the history copy."""
        return self.iteration_overhead_s + max(flops / self.prefill_flops_per_s,
                                               pcie_bytes / self.pcie_bytes_per_s)

    def prefill_cost(self, tensor: str) -> PrefillCost:
        """`prefill_step_time` per token, as scheduler.policy.restore_choice models it: one
        request computing `new` tokens on `ctx` while `copied` stored tokens cross PCIe."""
        f = self.prefill_flops_per_s
        return PrefillCost(self.iteration_overhead_s, self.forward_flops_per_token / f,
                           self.attn_flops_per_token_key / f,
                           self.stored_bytes_per_token(tensor) / self.pcie_bytes_per_s,
                           self.restore_flops_per_token(tensor) / f)

    def decode_step_time(self, batch: int, context_tokens: int, extra_flops: float = 0.0) -> float:
        """One decode step for `batch` sequences holding `context_tokens` KV tokens in all
        (`extra_flops`: prefill work it carries, a piggybacked span)."""
        mem = (self.weight_bytes + context_tokens * self.kv_bytes_per_token) / self.decode_bytes_per_s
        compute = (batch * self.forward_flops_per_token + extra_flops) / self.prefill_flops_per_s
        return self.iteration_overhead_s + max(mem, compute)

    def free_prefill_tokens(self, batch: int, context_tokens: int, done: int = 0) -> int:
        """Prefill tokens (after `done` of the same span) one decode step can compute without
        lasting longer: the memory-bound step's idle compute (the roofline's max)."""
        mem = (self.weight_bytes + context_tokens * self.kv_bytes_per_token) / self.decode_bytes_per_s
        spare = mem * self.prefill_flops_per_s - batch * self.forward_flops_per_token
        if spare <= 0:
            return 0
        # c·fwd + (c·done + c(c+1)/2)·attn <= spare, for the largest whole c
        half = self.attn_flops_per_token_key / 2
        lin = self.forward_flops_per_token + self.attn_flops_per_token_key * done + half
        c = (-lin + (lin * lin + 4 * half * spare) ** 0.5) / (2 * half)
        return max(int(c), 0)


def cost_model(tree: dict) -> CostModel:
    model, gpu, host, kv = tree["model"], tree["gpu"], tree["host"], tree["kv"]
    dtype = int(model.get("dtype_bytes", 2))
    choice = tensor_costs(model, dtype)
    parts = layer_flops_per_token(model)
    layers, h = model["num_layers"], model["hidden_size"]
    layer_params = sum(parts.values()) / 2
    weight_bytes = (layers * layer_params + model.get("vocab_size", 0) * h) * dtype
    q_dim = model["num_heads"] * model["head_dim"]
    gpu_kv = (gpu["memory_gib"] * GIB * gpu["memory_utilization"] - weight_bytes
              - gpu["activation_reserve_gib"] * GIB)
    if gpu_kv <= 0:
        raise ValueError(f"profile {tree.get('name')}: the weights leave no GPU memory for KV")
    return CostModel(
        name=tree.get("name", "?"),
        tensors=choice,
        kv_bytes_per_token=choice.kv.bytes_per_token,
        forward_flops_per_token=choice.kv.flops_saved_per_token,
        attn_flops_per_token_key=4.0 * q_dim * layers,
        weight_bytes=weight_bytes,
        prefill_flops_per_s=gpu["peak_tflops"] * 1e12 * gpu["prefill_mfu"],
        decode_bytes_per_s=gpu["hbm_gbps"] * 1e9 * gpu["decode_bw_efficiency"],
        iteration_overhead_s=gpu["iteration_overhead_s"],
        gpu_kv_bytes=int(gpu_kv),
        max_batch=int(gpu["max_batch"]),
        max_prefill_tokens=int(gpu["max_prefill_tokens"]),
        pcie_bytes_per_s=host["pcie_gbps"] * 1e9,
        dram_bytes=int(host["dram_gib"] * GIB),
        watermark_bytes=int(host["watermark_gib"] * GIB),
        ssd_bytes=int(host["ssd_gib"] * GIB),
        ssd_bytes_per_s=host["ssd_read_gbps"] * 1e9,
        max_concurrent_loads=int(host["max_concurrent_loads"]),
        max_kv_tokens=int(kv["max_kv_tokens"]),
    )


def load_profile(name_or_path: str, overrides: dict[str, Any] | None = None) -> CostModel:
    return cost_model(load_profile_dict(name_or_path, overrides))
