"""OPT family: MHA, learned positions (offset 2), LayerNorm (pre- or post-norm), ReLU MLP, biases."""
from __future__ import annotations

import torch
from torch import nn

from compute_worker.models.base import CausalLM, Packed, embedding, packed_attention
from compute_worker.models.config import ModelConfig
from compute_worker.models.fuse import rows_from
from compute_worker.models.llama import ACTIVATIONS

POSITION_OFFSET = 2  # OPT's learned position table reserves two leading rows (fairseq legacy)


class OPTLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        hid, D = cfg.hidden_size, cfg.head_dim
        self.nh, self.hd, self.pre_norm = cfg.num_heads, D, cfg.do_layer_norm_before
        self.attn_norm = nn.LayerNorm(hid, eps=cfg.layer_norm_eps, dtype=dtype)
        self.q_proj = nn.Linear(hid, self.nh * D, dtype=dtype)
        self.k_proj = nn.Linear(hid, self.nh * D, dtype=dtype)
        self.v_proj = nn.Linear(hid, self.nh * D, dtype=dtype)
        self.o_proj = nn.Linear(self.nh * D, hid, dtype=dtype)
        self.mlp_norm = nn.LayerNorm(hid, eps=cfg.layer_norm_eps, dtype=dtype)
        self.fc1 = nn.Linear(hid, cfg.intermediate_size, dtype=dtype)
        self.fc2 = nn.Linear(cfg.intermediate_size, hid, dtype=dtype)
        self.act = ACTIVATIONS[cfg.hidden_act]
        self.qkv: nn.Module | None = None  # fuse.py's one matmul for q|k|v, once loaded

    def _qkv(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k and v [N, H, D]."""
        if self.qkv is None:
            q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        else:
            q, k, v = self.qkv(h).to(h.dtype).chunk(3, dim=-1)  # attention wants one dtype
        return tuple(t.view(-1, self.nh, self.hd) for t in (q, k, v))

    def kv(self, h: torch.Tensor, rope: None) -> tuple[torch.Tensor, torch.Tensor]:
        """Tensor 6 [N, hidden] -> K and V [N, H, D] (no rotary: positions are in the embedding),
        as forward() computes them."""
        if self.qkv is None:
            k, v = self.k_proj(h), self.v_proj(h)
        else:
            k, v = rows_from(self.qkv, h, self.nh * self.hd).to(h.dtype).chunk(2, dim=-1)
        return k.view(-1, self.nh, self.hd), v.view(-1, self.nh, self.hd)

    def forward(self, x: torch.Tensor, idx: int, packed: Packed, rope: None,
                h6: list[torch.Tensor] | None) -> torch.Tensor:
        h = self.attn_norm(x) if self.pre_norm else x
        if h6 is not None:
            h6.append(h)
        q, k, v = self._qkv(h)
        x = x + self.o_proj(packed_attention(q, k, v, packed, idx))
        if not self.pre_norm:
            x = self.attn_norm(x)
        h = self.mlp_norm(x) if self.pre_norm else x
        x = x + self.fc2(self.act(self.fc1(h)))
        return x if self.pre_norm else self.mlp_norm(x)


class OPTForCausalLM(CausalLM):
    def _build(self, dtype: torch.dtype) -> None:
        cfg = self.config
        wdim = cfg.word_embed_proj_dim or cfg.hidden_size
        self.embed = embedding(cfg.vocab_size, wdim, dtype)
        self.pos_embed = embedding(cfg.max_position + POSITION_OFFSET, cfg.hidden_size,
                                  dtype)
        proj = wdim != cfg.hidden_size
        self.project_in = nn.Linear(wdim, cfg.hidden_size, bias=False, dtype=dtype) if proj else None
        self.project_out = nn.Linear(cfg.hidden_size, wdim, bias=False, dtype=dtype) if proj else None
        self.layers = nn.ModuleList(OPTLayer(cfg, dtype) for _ in range(cfg.num_layers))
        # Post-norm OPT (opt-350m) normalises inside every layer and has no final LayerNorm.
        self.final_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype) \
            if cfg.do_layer_norm_before else None
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(
            wdim, cfg.vocab_size, bias=False, dtype=dtype)

    def _check_positions(self, packed: Packed) -> None:
        last = packed.max_position
        if last >= self.config.max_position:
            raise ValueError(f"position {last} exceeds OPT's learned table ({self.config.max_position})")

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        if self.project_in is not None:
            x = self.project_in(x)
        return x + self.pos_embed(positions + POSITION_OFFSET)

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        if self.final_norm is not None:
            x = self.final_norm(x)
        return self.project_out(x) if self.project_out is not None else x
