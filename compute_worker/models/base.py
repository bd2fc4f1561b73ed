"""Batched forward shared by all architectures.

Tokens of all sequences in a batch are packed into one [N, hidden] matrix, so every projection and
MLP matmul runs once per layer for the whole batch (that is where batching buys throughput).
Attention is the only per-sequence step: each sequence attends over its own KVCache
(compute_worker/models/attention.py: a loop per sequence, or one fused call for a batch).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker.models.attention import (  # noqa: F401 (Packed, packed_attention: the layers')
    Packed, new_token_ids, packed_attention)
from compute_worker.models.config import ModelConfig
from compute_worker.models.kv_blocks import kv_block
from compute_worker.models.kv_cache import KVCache
from compute_worker.step_threads import at_least_threads


def embedding(num: int, dim: int, dtype: torch.dtype) -> nn.Embedding:
    """An Embedding left uninitialised, as the loaders fill it: its own init (normal_) on the
    meta device imports torch._dynamo, ~3 s of every worker's start."""
    return nn.Embedding(num, dim, _weight=torch.empty(num, dim, dtype=dtype))


@dataclass
class ForwardOut:
    logits: torch.Tensor  # [T_i, vocab] float32 ([1, vocab] when logits_last_only)
    hidden6: torch.Tensor | None = None  # [T_i, L, hidden] in model dtype
    final: torch.Tensor | None = None  # [T_i, hidden]: the head's input at every row (all_rows)


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
        # to_empty's empty_like on meta tensors runs torch's Python reference: ~1 s a model
        device = torch.device(device or "cpu")
        self._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=device))
        # quant.py's quantized copy of the output projection (None: the dense output_weight())
        self.head: nn.Module | None = None
        self.weights = "dense"  # the format prepare.py put the weights in
        self.block_override: int | None = None  # tests: another kv_block than the rule's
        # native_forward.py's layers in one call (prepare.py sets it for q4; None: the layers')
        self.native = None

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

    @property
    def kv_block(self) -> int:
        """Positions per aligned KV block (kv_blocks.py; 0: prefill chunks attend whole)."""
        if self.block_override is not None:
            return self.block_override
        return kv_block(self.dtype, self.weights, self.native is not None)

    def new_cache(self, capacity: int = 64) -> KVCache:
        return KVCache.for_config(self.config, dtype=self.dtype, device=self.device, capacity=capacity)

    def output_weight(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def _apply(self, fn, *args, **kwargs):
        """.to(), .float() and the like: the native step holds the old tensors, so rebuild it
        (it declines a model it cannot run, e.g. one cast to bfloat16)."""
        out = super()._apply(fn, *args, **kwargs)
        native = getattr(self, "native", None)
        if native is not None:
            self.native = type(native).build(self)
        return out

    @torch.inference_mode()
    def head_logits(self, final: torch.Tensor, threads: int = 0) -> torch.Tensor:
        """Logits in float32 of rows of ForwardOut.final (prompt logprobs, a chunk at a time)."""
        return self._head(final, threads)

    def _head(self, x: torch.Tensor, threads: int) -> torch.Tensor:
        """Logits in float32 of the final hidden states x."""
        with at_least_threads(threads):
            logits = F.linear(x, self.output_weight()) if self.head is None else self.head(x)
        return logits.float()

    @torch.inference_mode()
    def forward(self, batch: list[tuple[torch.Tensor, KVCache]], want_hidden6: bool = False,
                logits_last_only: bool | None = None, head_threads: int = 0,
                all_rows: list[bool] | None = None) -> list[ForwardOut]:
        """Run the new tokens of every sequence, appending their K/V to the caches.

        Positions continue from each cache's length. Returns one ForwardOut per sequence.
        `head_threads`: run the output projection on that many threads when the step runs on
        fewer (compute_worker/step_threads.py): it is one vocab x hidden matmul, large enough
        to split with profit where a small step's other ops are not.
        `all_rows[j]`: sequence j's ForwardOut.final holds the head's input at each of its rows
        (prompt logprobs: logits for every row at once would be [rows, vocab] in float32).
        A model with a native forward (q4) runs the whole batch there.
        """
        if self.native is not None:
            return self._native_forward(batch, want_hidden6, logits_last_only, head_threads,
                                        all_rows)
        packed = Packed(batch, self.device, self.kv_block)
        self._check_positions(packed)
        x = self._embed(packed.ids, packed.positions)
        rope = self._rope(packed.positions)
        h6: list[torch.Tensor] | None = [] if want_hidden6 else None
        for i, layer in enumerate(self.layers):
            x = layer(x, i, packed, rope, h6)
        hidden = torch.stack(h6, dim=1) if h6 is not None else None  # [N, L, hidden]
        return self._outputs(x, [s.sl for s in packed.seqs], hidden, logits_last_only,
                             head_threads, all_rows)

    def _outputs(self, x: torch.Tensor, rows: list[slice], hidden6: torch.Tensor | None,
                 logits_last_only: bool | None, head_threads: int,
                 all_rows: list[bool] | None = None) -> list[ForwardOut]:
        """The last layer's output x [N, hidden] -> one ForwardOut per sequence (its `rows`)."""
        last_only = self.logits_last_only if logits_last_only is None else logits_last_only
        finals = [self._final(x[sl]) if all_rows and all_rows[j] else None
                  for j, sl in enumerate(rows)]
        if last_only and x.shape[0] > len(rows):  # else every row is a last one
            x = x[torch.tensor([sl.stop - 1 for sl in rows], device=x.device)]
        logits = self._head(self._final(x), head_threads)
        return [ForwardOut(logits[j:j + 1] if last_only else logits[sl],
                           None if hidden6 is None else hidden6[sl], finals[j])
                for j, sl in enumerate(rows)]

    def _native_forward(self, batch: list[tuple[torch.Tensor, KVCache]], want_hidden6: bool,
                        logits_last_only: bool | None, head_threads: int,
                        all_rows: list[bool] | None) -> list[ForwardOut]:
        ids = new_token_ids(batch)
        caches = [cache for _, cache in batch]
        counts = [len(t) for t in ids]
        positions = torch.cat([torch.arange(c.length, c.length + n) for c, n in zip(caches, counts)])
        ids = torch.cat(ids)
        cos, signed_sin = self._rope(positions)
        x, h6 = self.native(self._embed(ids, positions), caches, counts, cos[:, 0],
                            signed_sin[:, 0], want_hidden6)
        ends = list(itertools.accumulate(counts))
        rows = [slice(end - n, end) for n, end in zip(counts, ends)]
        return self._outputs(x, rows, h6, logits_last_only, head_threads, all_rows)

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
