"""Llama family: SmolLM2, Llama 2/3, Mistral, Qwen2 (RMSNorm, SwiGLU, GQA, RoPE, optional biases)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker.models.base import CausalLM, Packed, embedding, packed_attention
from compute_worker.models.config import ModelConfig
from compute_worker.models.fuse import rows_from
from compute_worker.models.rope import apply_rope, inv_frequencies, rope_cos_sin

ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu,
               "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}

Rope = tuple[torch.Tensor, torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dtype=dtype))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one fused op, bit for bit the two-step form below
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        # Normalise in float32, round to the model dtype, then scale: same rounding as HF.
        return self.weight * F.rms_norm(x.float(), x.shape[-1:], eps=self.eps).to(x.dtype)


class LlamaLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        hid, D = cfg.hidden_size, cfg.head_dim
        self.nh, self.nkv, self.hd = cfg.num_heads, cfg.num_kv_heads, D
        self.attn_norm = RMSNorm(hid, cfg.rms_norm_eps, dtype)
        self.q_proj = nn.Linear(hid, self.nh * D, bias=cfg.attention_bias, dtype=dtype)
        self.k_proj = nn.Linear(hid, self.nkv * D, bias=cfg.attention_bias, dtype=dtype)
        self.v_proj = nn.Linear(hid, self.nkv * D, bias=cfg.attention_bias, dtype=dtype)
        self.o_proj = nn.Linear(self.nh * D, hid, bias=cfg.attention_out_bias, dtype=dtype)
        self.mlp_norm = RMSNorm(hid, cfg.rms_norm_eps, dtype)
        self.gate_proj = nn.Linear(hid, cfg.intermediate_size, bias=cfg.mlp_bias, dtype=dtype)
        self.up_proj = nn.Linear(hid, cfg.intermediate_size, bias=cfg.mlp_bias, dtype=dtype)
        self.down_proj = nn.Linear(cfg.intermediate_size, hid, bias=cfg.mlp_bias, dtype=dtype)
        self.act = ACTIVATIONS[cfg.hidden_act]
        # fuse.py's one matmul for q|k|v and one for gate|up, in place of the projections above
        # once a model is loaded (None: the separate ones, as the checkpoint names them).
        self.qkv: nn.Module | None = None
        self.gate_up: nn.Module | None = None

    def _qkv(self, h: torch.Tensor) -> torch.Tensor:
        """[N, (Hq + 2 Hkv) * D]: q, k and v side by side."""
        if self.qkv is not None:
            return self.qkv(h)
        return torch.cat((self.q_proj(h), self.k_proj(h), self.v_proj(h)), dim=-1)

    def kv(self, h: torch.Tensor, rope: Rope) -> tuple[torch.Tensor, torch.Tensor]:
        """Tensor 6 [N, hidden] -> rotated K and V [N, Hkv, D], as forward() computes them."""
        if self.qkv is None:
            k, v = self.k_proj(h), self.v_proj(h)
        else:
            k, v = rows_from(self.qkv, h, self.nh * self.hd).chunk(2, dim=-1)
        return (apply_rope(k.view(-1, self.nkv, self.hd), *rope),
                v.view(-1, self.nkv, self.hd))

    def forward(self, x: torch.Tensor, idx: int, packed: Packed, rope: Rope,
                h6: list[torch.Tensor] | None) -> torch.Tensor:
        h = self.attn_norm(x)
        if h6 is not None:
            h6.append(h)
        qkv, nqk = self._qkv(h), self.nh + self.nkv
        qk = apply_rope(qkv[:, :nqk * self.hd].view(-1, nqk, self.hd), *rope)  # q and k at once
        v = qkv[:, nqk * self.hd:].view(-1, self.nkv, self.hd)
        x = x + self.o_proj(packed_attention(qk[:, :self.nh], qk[:, self.nh:], v, packed, idx))
        h = self.mlp_norm(x)
        if self.gate_up is not None:
            gate, up = self.gate_up(h).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(h), self.up_proj(h)
        return x + self.down_proj(self.act(gate) * up)


class LlamaForCausalLM(CausalLM):
    def _build(self, dtype: torch.dtype) -> None:
        cfg = self.config
        self.embed = embedding(cfg.vocab_size, cfg.hidden_size, dtype)
        self.layers = nn.ModuleList(LlamaLayer(cfg, dtype) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(
            cfg.hidden_size, cfg.vocab_size, bias=False, dtype=dtype)
        self._inv_freq: torch.Tensor | None = None  # not a buffer: meta-init would leave it garbage

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.embed(ids)

    def _rope(self, positions: torch.Tensor) -> Rope:
        if self._inv_freq is None or self._inv_freq.device != positions.device:
            self._inv_freq = inv_frequencies(self.config, positions.device)
        return rope_cos_sin(self._inv_freq, positions, self.dtype)

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)
