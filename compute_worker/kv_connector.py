"""What the turn runner needs from a KV store: restore a prompt's prefix, save a turn's KV.

Correctness of reuse is each connector's promise: a restored prefix is KV computed from exactly
those token ids, by the same model, in the same format and dtype (or converted from float32:
dtype_reuse.py); at least the last prompt token is left to compute (its logits pick the first
answer token). A failing store degrades to recomputation, never to a wrong answer.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

import torch

from compute_worker import kv_codec
from compute_worker.kv_codec import TIER_NONE, UNSPECIFIED


@dataclass
class Restored:
    cache: object  # KVCache holding the reused prefix, with room for the turn
    tokens: int = 0  # prompt tokens whose KV was restored
    tier: int = TIER_NONE  # where the KV came from
    format: int = UNSPECIFIED
    load_s: float = 0.0  # reading (and converting) the KV
    convert_s: float = 0.0  # tensor 6 -> K/V
    from_parent: bool = False  # restored from the parent session's KV
    converted: bool = False  # from KV of another dtype (dtype_reuse.py), converted
    prefix6: bytes = b""  # tensor 6 of the restored prefix (model dtype), kept for a branch's
    # or a converted prefix's first save, which rewrites the session from token 0
    recomputed: int = 0  # of `tokens`, the first ones computed, not read (a reversed split)

    @property
    def rewrites(self) -> bool:
        """The turn's save writes the session's whole KV: the session holds none of this
        prefix itself (a parent's), or holds it in another dtype."""
        return self.from_parent or self.converted


@dataclass
class Suffix:
    """Stored K/V of prompt tokens [start, end) (a reversed split's read)."""
    kv: torch.Tensor  # [L, 2, H, end - start, D]
    start: int
    end: int
    tier: int
    format: int
    load_s: float
    convert_s: float


def fresh_cache(model, prompt: list[int]):
    return model.new_cache(len(prompt) + 64)


class KVConnector(abc.ABC):
    """`kv_format`: what the connector stores (KV_FORMAT_*); `kv_dtype`: in which element type
    (KV_DTYPE_*, the model's); `bytes_per_token`: its size."""

    def __init__(self, model, kv_format: int):
        self.model = model
        self.kv_format = kv_format
        self.kv_dtype = kv_codec.wire_dtype(model.dtype)
        self.bytes_per_token = kv_codec.bytes_per_token(model.config, kv_format, model.dtype)

    @abc.abstractmethod
    def restore(self, session_id: str, prompt: list[int], parent: str = "",
                shards: list[str] | None = None, salt: str = "") -> Restored:
        """The KV of the longest prefix of `prompt` stored for the session (or its `parent`
        branch). `shards`: the store shards the scheduler sent (None: the connector's own).
        `salt`: the turn's cache_salt; KV saved under another salt (or none) is not read."""

    def read_suffix(self, session_id: str, prompt: list[int], start_token: int,
                    shards: list[str] | None = None, salt: str = "") -> Suffix | None:
        """The stored K/V of the prompt's tokens from `start_token` on (None: none; a
        connector that cannot read a suffix recomputes it)."""
        return None

    @abc.abstractmethod
    def save(self, session_id: str, tokens: list[int], cache, hidden6: list[torch.Tensor],
             restored: Restored | None = None, shards: list[str] | None = None,
             salt: str = "") -> None:
        """Save the KV of `tokens` held in `cache` (and, for tensor 6, `hidden6`: that of the
        tokens fed to the model), past what `restored` brought (None: nothing)."""


class Recompute(KVConnector):
    """No store (`--store ''`, the baseline): every prompt is computed in full, nothing kept."""

    def restore(self, session_id, prompt, parent="", shards=None, salt="") -> Restored:
        return Restored(fresh_cache(self.model, prompt))

    def save(self, session_id, tokens, cache, hidden6, restored=None, shards=None,
             salt="") -> None:
        pass
