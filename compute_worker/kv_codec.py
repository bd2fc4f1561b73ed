"""KV tensors <-> the store's bytes (token-major, so appending a turn appends bytes).

K/V format: per token [layers, 2, kv_heads, head_dim]. Tensor-6 format: per token
[layers, hidden], the normalised hidden state that feeds Q/K/V; the model turns it back into K/V.
Bytes are the model's dtype, little-endian, as torch lays them out; the store records which
(KV_DTYPE_*). Formats, dtypes and tiers are the wire schema's enum numbers, the one vocabulary
of the worker, the store and the scheduler.
"""
from __future__ import annotations

import torch

from services.runtime.gen import common_pb2

from compute_worker.host_copy import to_device
from compute_worker.models.config import ModelConfig
from compute_worker.models.kv_cache import kv_from_token_major

KV, TENSOR6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
UNSPECIFIED = common_pb2.KV_FORMAT_UNSPECIFIED
TIER_NONE = common_pb2.TIER_NONE
FLOAT32, BFLOAT16 = common_pb2.KV_DTYPE_FLOAT32, common_pb2.KV_DTYPE_BFLOAT16
_WIRE_DTYPES = {torch.float32: FLOAT32, torch.bfloat16: BFLOAT16,
                torch.float16: common_pb2.KV_DTYPE_FLOAT16}
_TORCH_DTYPES = {wire: dtype for dtype, wire in _WIRE_DTYPES.items()}


def wire_dtype(dtype: torch.dtype) -> int:
    """KV_DTYPE_* of KV held in `dtype`."""
    return _WIRE_DTYPES[dtype]


def torch_dtype(wire: int) -> torch.dtype | None:
    """The torch dtype of KV_DTYPE_* `wire` (None: unspecified or unknown)."""
    return _TORCH_DTYPES.get(wire)


def dtype_name(wire: int) -> str:
    """'bfloat16', 'float32'... of KV_DTYPE_* `wire`, for logs ('unspecified' if unknown)."""
    known = torch_dtype(wire)
    return str(known).removeprefix("torch.") if known else "unspecified"


def bytes_per_token(config: ModelConfig, format: int, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    if format == TENSOR6:
        return config.hidden6_bytes_per_token(size)
    return config.kv_bytes_per_token(size)


def to_bytes(token_major: torch.Tensor) -> bytes:
    """[T, ...] tensor in any dtype -> its raw bytes."""
    return token_major.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()


def convert(data: bytes, src: torch.dtype, dst: torch.dtype) -> bytes:
    """Bytes of values held in `src`, held in `dst` (rounded to nearest when narrower)."""
    return to_bytes(torch.frombuffer(bytearray(data), dtype=src).to(dst))


def kv_from_bytes(model, format: int, data: bytes, dtype: torch.dtype,
                  start_pos: int = 0) -> torch.Tensor:
    """Stored bytes of tokens from position `start_pos` on, held in `dtype` -> K/V
    [L, 2, H, T, D] in the model's dtype on its device (converting the dtype, and tensor 6,
    whose keys are rotated by position)."""
    cfg: ModelConfig = model.config
    flat = torch.frombuffer(bytearray(data), dtype=dtype).to(model.dtype)
    if format == TENSOR6:
        hidden6 = to_device(flat.view(-1, cfg.num_layers, cfg.hidden_size), model.device)
        return model.kv_from_hidden6(hidden6, start_pos)
    tm = to_device(flat.view(-1, cfg.num_layers, 2, cfg.num_kv_heads, cfg.head_dim), model.device)
    return kv_from_token_major(tm)
