"""Batched forward shared by all architectures.

Tokens of all sequences in a batch are packed into one [N, hidden] matrix, so every projection and
MLP matmul runs once per layer for the whole batch (that is where batching buys throughput).
Attention is the only per-sequence step ("varlen loop"): each sequence attends over its own
KVCache view with scaled_dot_product_attention, so nothing is padded and no cache is copied.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker.models.config import ModelConfig
from compute_worker.models.kv_cache import KVCache


@dataclass
class ForwardOut:
    logits: torch.Tensor  # [T_i, vocab] float32 ([1, vocab] when logits_last_only)
    hidden6: torch.Tensor | None = None  # [T_i, L, hidden] in model dtype


@dataclass
class _Seq:
    cache: KVCache
    sl: slice  # rows of this sequence in the packed batch
    mask: torch.Tensor | None  # [T, P+T] bool, or None when is_causal/no mask suffices
    is_causal: bool


class Packed:
    """Token ids, absolute positions and attention bookkeeping for one batched forward."""

    def __init__(self, batch: list[tuple[torch.Tensor, KVCache]], device: torch.device) -> None:
        if not batch:
            raise ValueError("empty batch")
        if len({id(c) for _, c in batch}) != len(batch):
            raise ValueError("the same KVCache appears twice in one batch")
        ids, pos, self.seqs = [], [], []
        n, self.max_position = 0, 0
        for tokens, cache in batch:
            tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(-1)
            T, P = tokens.numel(), cache.length
            if T == 0:
                raise ValueError("a sequence in the batch has no new tokens")
            cache.reserve(T)  # grow once up front instead of inside the layer loop
            ids.append(tokens)
            pos.append(torch.arange(P, P + T))
            self.max_position = max(self.max_position, P + T - 1)  # host int: no device sync
            if T == 1:  # one query sees every cached key: no mask
                mask, causal = None, False
            elif P == 0:  # square causal mask: SDPA builds it (top-left aligned == correct here)
                mask, causal = None, True
            else:  # chunked prefill: query i (position P+i) sees keys 0..P+i
                mask = torch.arange(P + T, device=device)[None, :] <= (
                    P + torch.arange(T, device=device)[:, None])
                causal = False
            self.seqs.append(_Seq(cache, slice(n, n + T), mask, causal))
            n += T
        self.num_tokens = n
        self.ids = torch.cat(ids).to(device)
        self.positions = torch.cat(pos).to(device)

    def last_rows(self) -> torch.Tensor:
        return torch.tensor([s.sl.stop - 1 for s in self.seqs], device=self.ids.device)


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: Packed,
                     layer: int) -> torch.Tensor:
    """q [N, Hq, D], k/v [N, Hkv, D] for the new tokens -> attention output [N, Hq*D].

    Appends k/v to each sequence's cache (layer `layer`) and attends over the cache.
    """
    N, Hq, D = q.shape
    group = Hq // k.shape[1]
    out = q.new_empty(N, Hq, D)
    for s in packed.seqs:
        K, V = s.cache.append(layer, k[s.sl].transpose(0, 1), v[s.sl].transpose(0, 1))
        # 4-D inputs reach the fused (flash) kernels; 3-D ones fall back to the math path on CPU.
        # Decode: enable_gqa reads the shared K/V in place. Prefill (T>1): the fused causal kernel
        # wants equal head counts and the K/V copy is cheap next to the T x S attention.
        if group > 1 and s.sl.stop - s.sl.start > 1:
            K, V = K.repeat_interleave(group, 0), V.repeat_interleave(group, 0)
        o = F.scaled_dot_product_attention(q[s.sl].transpose(0, 1)[None], K[None], V[None],
                                           attn_mask=s.mask, is_causal=s.is_causal,
                                           enable_gqa=K.shape[0] != Hq)
        out[s.sl] = o[0].transpose(0, 1)
    return out.view(N, Hq * D)


class CausalLM(nn.Module):
    """Common driver; subclasses provide `_build`, `_embed`, `_rope`, `_final` and `layers`.

    Each layer implements `forward(x, idx, packed, rope, h6) -> x` and `kv(h, rope) -> (k, v)`,
    the latter shared with `kv_from_hidden6` so restored K/V use exactly the forward's math.
    """

    layers: nn.ModuleList
    lm_head: nn.Linear | None

    def __init__(self, config: ModelConfig, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.config = config
        self.logits_last_only = False  # engine may set it; per-call override in forward()
        dtype = dtype or torch.float32
        with torch.device("meta"):  # no init cost; loaders fill every tensor
            self._build(dtype)
        self.to_empty(device=device or "cpu")
        # quant.py's quantized copy of the output projection (None: the dense output_weight())
        self.head: nn.Module | None = None
        self.weights = "dense"  # the format prepare.py put the weights in

    # -- to implement ------------------------------------------------------------------------
    def _build(self, dtype: torch.dtype) -> None:
        raise NotImplementedError

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None

    def _final(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _check_positions(self, packed: Packed) -> None:
        pass

    # -- common ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def new_cache(self, capacity: int = 64) -> KVCache:
        return KVCache.for_config(self.config, dtype=self.dtype, device=self.device, capacity=capacity)

    def output_weight(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    @torch.inference_mode()
    def forward(self, batch: list[tuple[torch.Tensor, KVCache]], want_hidden6: bool = False,
                logits_last_only: bool | None = None) -> list[ForwardOut]:
        """Run the new tokens of every sequence, appending their K/V to the caches.

        Positions continue from each cache's length. Returns one ForwardOut per sequence.
        """
        packed = Packed(batch, self.device)
        self._check_positions(packed)
        x = self._embed(packed.ids, packed.positions)
        rope = self._rope(packed.positions)
        h6: list[torch.Tensor] | None = [] if want_hidden6 else None
        for i, layer in enumerate(self.layers):
            x = layer(x, i, packed, rope, h6)
        last_only = self.logits_last_only if logits_last_only is None else logits_last_only
        if last_only:
            x = x[packed.last_rows()]
        x = self._final(x)
        logits = (F.linear(x, self.output_weight()) if self.head is None else self.head(x)).float()
        hidden = torch.stack(h6, dim=1) if h6 is not None else None  # [N, L, hidden]
        outs = []
        for j, s in enumerate(packed.seqs):
            lg = logits[j:j + 1] if last_only else logits[s.sl]
            outs.append(ForwardOut(lg, hidden[s.sl] if hidden is not None else None))
        return outs

    @torch.inference_mode()
    def kv_from_hidden6(self, hidden6: torch.Tensor, start_pos: int) -> torch.Tensor:
        """Tensor 6 [T, L, hidden] of tokens at positions start_pos.. -> K/V [L, 2, H, T, D]."""
        T, L, _ = hidden6.shape
        if L != self.config.num_layers:
            raise ValueError(f"hidden6 has {L} layers, model has {self.config.num_layers}")
        h6 = hidden6.to(device=self.device, dtype=self.dtype)
        rope = self._rope(torch.arange(start_pos, start_pos + T, device=self.device))
        cfg = self.config
        out = torch.empty(L, 2, cfg.num_kv_heads, T, cfg.head_dim, dtype=self.dtype, device=self.device)
        for i, layer in enumerate(self.layers):
            k, v = layer.kv(h6[:, i], rope)  # [T, H, D]
            out[i, 0] = k.transpose(0, 1)
            out[i, 1] = v.transpose(0, 1)
        return out
