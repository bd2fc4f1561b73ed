"""Rotary position embedding in the Hugging Face "rotate_half" convention (halves, not pairs)."""
from __future__ import annotations

import math

import torch

from compute_worker.models.config import ModelConfig


def inv_frequencies(config: ModelConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    D = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, D, 2, dtype=torch.float32, device=device) / D))
    sc = config.rope_scaling or {}
    kind = sc.get("rope_type", sc.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / sc["factor"]
    if kind == "llama3":  # Llama 3.1: slow down only the low-frequency (long-wavelength) bands
        factor, lo, hi = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"]
        old_ctx = sc["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old_ctx / lo, inv / factor, inv)
        smooth = (old_ctx / wavelen - lo) / (hi - lo)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_ctx / hi) & (wavelen <= old_ctx / lo)
        return torch.where(medium, blended, scaled)
    raise NotImplementedError(f"rope scaling {kind!r}")


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The tables apply_rope takes for absolute positions: cos [N, 1, D] and the signed sin
    [N, 1, D] (its first half negated); angles in float32 then cast (as HF does)."""
    freqs = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin().to(dtype)
    half = sin.shape[-1] // 2
    return emb.cos().to(dtype)[:, None], torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)[:, None]


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """x [N, H, D] rotated by per-token tables [N, 1, D]. HF's x*cos + rotate_half(x)*sin with
    rotate_half(x) = (-x2, x1): the sign lives in the table, so one roll replaces the halves'
    negation and concatenation, bit for bit (negation is exact)."""
    return x * cos + x.roll(x.shape[-1] // 2, -1) * signed_sin
