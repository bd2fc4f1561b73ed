"""A GGUF file read directly: its metadata as plain Python values and its tensors as torch.

The `gguf` package's reader builds a numpy view per field part (about 250,000 of them for a
49k-token vocabulary and its merges), which took 5-8 s of a worker's start; `struct` over the
mapped file reads the same metadata in a fraction of a second. The formats our checkpoints use
(F32, F16, BF16, Q8_0, Q4_0, Q4_1) are dequantised with torch, element for element as
`gguf.quants` does (tests/test_loaders.py compares them); any other type goes through
`gguf.quants`.
"""
from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from compute_worker.loaders.model_source import GGUF_MAGIC as MAGIC

DEFAULT_ALIGNMENT = 32
# metadata value types: id -> struct format (8 string, 9 array are read apart)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# ggml tensor types dequantised here: id -> (elements per block, bytes per block)
F32, F16, Q4_0, Q4_1, Q8_0, BF16 = 0, 1, 2, 3, 8, 30
_BLOCKS = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q4_0: (32, 18), Q4_1: (32, 20),
           Q8_0: (32, 34)}


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    type: int  # ggml type id
    shape: tuple[int, ...]  # row-major, as torch has it (GGUF lists the dims innermost first)
    offset: int  # bytes from the start of the file
    nbytes: int


class GGUFFile:
    """`fields`: every metadata key -> its value (str, int, float, bool or list); `tensors`:
    their layout in file order; `tensor(t)`: the float32 values of one."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if bytes(self._map[:4]) != MAGIC:
            raise ValueError(f"{self.path} is not a GGUF file")
        self._pos = 4
        version, n_tensors, n_fields = self._unpack("<I"), self._unpack("<Q"), self._unpack("<Q")
        if version < 2:
            raise ValueError(f"{self.path}: GGUF version {version} is not supported")
        self.fields: dict[str, Any] = {}
        for _ in range(n_fields):
            key = self._string()
            self.fields[key] = self._value(self._unpack("<I"))
        layout = []
        for _ in range(n_tensors):
            name = self._string()
            dims = [self._unpack("<Q") for _ in range(self._unpack("<I"))]
            layout.append((name, dims, self._unpack("<I"), self._unpack("<Q")))
        align = int(self.fields.get("general.alignment", DEFAULT_ALIGNMENT))
        start = -(-self._pos // align) * align
        self.tensors = [GGUFTensor(name, kind, tuple(reversed(dims)), start + offset,
                                   _nbytes(kind, dims)) for name, dims, kind, offset in layout]

    # -- metadata --------------------------------------------------------------------------
    def _unpack(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self._map, self._pos)
        self._pos += struct.calcsize(fmt)
        return value

    def _string(self) -> str:
        n = self._unpack("<Q")
        text = self._map[self._pos:self._pos + n].decode("utf-8")
        self._pos += n
        return text

    def _value(self, kind: int):
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, n = self._unpack("<I"), self._unpack("<Q")
            if item in _SCALARS:  # one unpack for the whole array
                fmt = _SCALARS[item]
                values = list(struct.unpack_from(f"<{n}{fmt[1]}", self._map, self._pos))
                self._pos += n * struct.calcsize(fmt)
                return values
            return [self._value(item) for _ in range(n)]
        if kind not in _SCALARS:
            raise ValueError(f"{self.path}: unknown GGUF value type {kind}")
        return self._unpack(_SCALARS[kind])

    # -- tensors ---------------------------------------------------------------------------
    def raw(self, t: GGUFTensor) -> np.ndarray:
        """The tensor's bytes, a read-only view of the mapped file."""
        return np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def tensor(self, t: GGUFTensor) -> torch.Tensor:
        """float32 values [*t.shape], a tensor of its own (writable, not the file's)."""
        if t.type not in _BLOCKS:
            return self.tensor_by_gguf(t)
        data = torch.from_numpy(self.raw(t).copy())
        return _dequantize(data, t.type).reshape(t.shape)

    def tensor_by_gguf(self, t: GGUFTensor) -> torch.Tensor:
        """The same through `gguf.quants` (the types not dequantised here; K-quants and such)."""
        from gguf.quants import dequantize

        values = np.array(dequantize(self.raw(t), t.type), np.float32)
        return torch.from_numpy(values).reshape(t.shape)


def _nbytes(kind: int, dims: list[int]) -> int:
    n = int(np.prod(dims)) if dims else 1
    if kind in _BLOCKS:
        per_block, size = _BLOCKS[kind]
    else:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        per_block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    return n // per_block * size


def _half(blocks: torch.Tensor, lo: int) -> torch.Tensor:
    """Bytes lo, lo+1 of every block as one float16 each, widened: [blocks, 1] float32."""
    return blocks[:, lo:lo + 2].contiguous().view(torch.float16).float()


def _dequantize(data: torch.Tensor, kind: int) -> torch.Tensor:
    """uint8 bytes -> float32 values, as ggml's reference dequantisation computes them."""
    if kind == F32:
        return data.view(torch.float32)
    if kind in (F16, BF16):
        return data.view(torch.float16 if kind == F16 else torch.bfloat16).float()
    blocks = data.view(-1, _BLOCKS[kind][1])
    if kind == Q8_0:  # d, then 32 signed bytes: x * d
        return (blocks[:, 2:].contiguous().view(torch.int8).float() * _half(blocks, 0)).flatten()
    qs = blocks[:, -16:]  # 32 4-bit levels: the low nibbles are elements 0-15, the high 16-31
    levels = torch.cat((qs & 0x0F, qs >> 4), dim=1).float()
    if kind == Q4_0:  # d, levels: (q - 8) * d
        return ((levels - 8) * _half(blocks, 0)).flatten()
    return (_half(blocks, 0) * levels + _half(blocks, 2)).flatten()  # Q4_1: d, m: d * q + m
