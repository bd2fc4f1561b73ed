"""Per-sequence KV cache with amortised growth, plus token-major conversion for the KV store.

Layout [num_layers, 2, num_kv_heads, capacity, head_dim]: a layer's K (or V) for all heads is one
strided view that scaled_dot_product_attention consumes without a copy. The store keeps bytes
token-major ([T, L, 2, H, D]) so that saving a new turn is a pure append; the helpers convert.
Tensors are created and mutated under inference_mode (like the model's forward), so a cache grown
inside forward can still be extended or copied outside it.
"""
from __future__ import annotations

import torch

from compute_worker.models.config import ModelConfig


class KVCache:
    @torch.inference_mode()
    def __init__(self, num_layers: int, num_kv_heads: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                 capacity: int = 64) -> None:
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.data = torch.empty(num_layers, 2, num_kv_heads, max(capacity, 1), head_dim,
                                dtype=dtype, device=device)
        self.length = 0

    @classmethod
    def for_config(cls, config: ModelConfig, *, dtype: torch.dtype = torch.float32,
                   device: torch.device | str = "cpu", capacity: int = 64) -> "KVCache":
        return cls(config.num_layers, config.num_kv_heads, config.head_dim,
                   dtype=dtype, device=device, capacity=capacity)

    # -- properties ------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.data.shape[3]

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def bytes_per_token(self) -> int:
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * self.data.element_size()

    @property
    def nbytes(self) -> int:
        """Bytes of the filled part (what saving this cache costs), not the allocation."""
        return self.length * self.bytes_per_token

    def __len__(self) -> int:
        return self.length

    # -- access ----------------------------------------------------------------------------
    def keys(self, layer: int) -> torch.Tensor:
        return self.data[layer, 0, :, : self.length]

    def values(self, layer: int) -> torch.Tensor:
        return self.data[layer, 1, :, : self.length]

    @torch.inference_mode()
    def reserve(self, extra: int) -> None:
        """Ensure room for `extra` more tokens; grows by doubling so appends are amortised O(1)."""
        need = self.length + extra
        if need <= self.capacity:
            return
        new_cap = max(need, 2 * self.capacity)
        data = torch.empty(*self.data.shape[:3], new_cap, self.head_dim,
                           dtype=self.data.dtype, device=self.data.device)
        data[:, :, :, : self.length].copy_(self.data[:, :, :, : self.length])
        self.data = data

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v ([H, T, D]) after the filled part of `layer` and return that layer's full K, V.

        `length` advances only when the last layer is written, so all layers of one forward see
        the same start position and a forward that fails midway leaves the cache unchanged.
        (Inside a forward, already in inference mode, it enters none: a decode step appends
        once a layer, and entering the mode costs about what the copies do.)
        """
        if not torch.is_inference_mode_enabled():
            with torch.inference_mode():
                return self.append(layer, k, v)
        T = k.shape[1]
        if self.length + T > self.capacity:
            self.reserve(T)
        end = self.length + T
        # One view of the layer, then its slices: 8 view and copy ops where indexing `data`
        # anew for each of the four tensors took 14 (a decode step runs this once per layer
        # and sequence, and at batch 1 each op's dispatch costs about what its copy does).
        kv = self.data[layer]
        new = kv[:, :, self.length:end]
        new[0].copy_(k)
        new[1].copy_(v)
        K, V = kv[:, :, :end].unbind(0)
        if layer == self.num_layers - 1:
            self.length = end
        return K, V

    def truncate(self, length: int) -> None:
        """Forget the KV past the first `length` tokens (later appends overwrite it)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a {self.length}-token cache to {length}")
        self.length = length

    @torch.inference_mode()
    def extend(self, kv: torch.Tensor) -> None:
        """Append a whole [L, 2, H, T, D] block (e.g. restored from tensor 6) at the end."""
        T = kv.shape[3]
        self.reserve(T)
        self.data[:, :, :, self.length:self.length + T].copy_(kv)
        self.length += T

    def to_token_major(self, start: int = 0, end: int | None = None) -> torch.Tensor:
        return kv_to_token_major(self.data[:, :, :, start:(self.length if end is None else end)])


def kv_to_token_major(kv: torch.Tensor) -> torch.Tensor:
    """[L, 2, H, T, D] -> contiguous [T, L, 2, H, D]."""
    return kv.permute(3, 0, 1, 2, 4).contiguous()


def kv_from_token_major(kv_tm: torch.Tensor) -> torch.Tensor:
    """[T, L, 2, H, D] -> contiguous [L, 2, H, T, D]."""
    return kv_tm.permute(1, 2, 3, 0, 4).contiguous()
