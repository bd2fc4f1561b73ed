"""Weight-only formats: bf16 (the matrix units' dtype), int8 per output channel, int4 per group
of 32 inputs.

A decode step reads every weight once per token, so fewer bytes per weight is fewer ms per token
once the step's op overhead is small. torch ships CPU kernels for both (`_weight_int8pack_mm`,
`_weight_int4pack_mm_for_cpu`); measured here (Sapphire Rapids, torch 2.13) they run vectorised
only for bfloat16 activations (float32 ones take a scalar path, 3-10x slower than dense float32),
so each quantized linear rounds its input to bfloat16 and returns bfloat16: the layers add it
to the residual stream, rotate it or store it in the KV cache in the model dtype (an exact
widening, one op fewer than casting back), so those keep the model dtype; the MLP's activation
runs in bfloat16, as the next matmul's input would be rounded to it anyway. Both kernels give
a row the same bits whatever the batch around it, which is what keeps a restored KV answer
equal to a recomputed one within a format (tests/test_quant.py).

A format changes the model's numbers: KV made with one must never be served to a worker with
another, so `weights_label` is part of the model's identity in the store.

bf16 is the prefill format of a float32 model on a CPU with AMX: the weights are stored in
bfloat16 (half the bytes) and each matmul runs on the matrix units, while everything between the
matmuls (residual stream, norms, attention, KV) stays float32, so a restored prefix's rounding
does not compound through the layers as in a model wholly in bfloat16 (docs/weights.md).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker.config import WEIGHT_FORMATS
from compute_worker.models import native_linear

QUANTIZED = (*WEIGHT_FORMATS[1:], "q8")  # q8: q4's output projection (native_linear.py)
NATIVE = ("q4", "q8")  # run by our kernels, not torch's
INT4_GROUP = 32  # the source GGUF's Q4_1 block: its 4-bit levels map onto int4 exactly
ACTIVATION = torch.bfloat16  # what the kernels run vectorised on


class Bf16Linear(nn.Module):
    """W rounded to bfloat16 [out, in]; y = W (x rounded to bfloat16), widened to x's dtype.
    torch's CPU bf16 matmul accumulates in float32 and rounds its output to bfloat16 (no
    float32-output form on CPU), so the widening is exact and the next op runs in float32.
    oneDNN picks its kernel (and so the order of a row's sums) by the number of rows, so a row's
    bf16 output can differ by a step between chunkings; running rows in fixed blocks to avoid
    that matched 31 of 40 conversations where this matches 32 (`bidaw bench exactness`) and
    made the layer slower than float32 (a weight reorder per call), so it is not done."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight", weight.detach().to(ACTIVATION).contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x.to(ACTIVATION), self.weight).to(x.dtype)
        return y if self.bias is None else y + self.bias


class Int8Linear(nn.Module):
    """W ~ q * s: q int8 [out, in], s [out] = max |row| / 127 (symmetric, per output channel)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        scale = scale.to(ACTIVATION)  # quantize against the scale the kernel will use
        q = torch.round(w / scale.float()[:, None]).clamp(-128, 127).to(torch.int8)
        self.register_buffer("qweight", q)
        self.register_buffer("scale", scale)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int8pack_mm(x.to(self.scale.dtype).contiguous(), self.qweight, self.scale)
        return y if self.bias is None else y + self.bias


class Int4Linear(nn.Module):
    """W ~ (q - 8) * s + z per group of INT4_GROUP inputs: q in 0..15 (asymmetric min/max),
    packed by torch for its CPU kernel; s and z [in / group, out, 2] in bfloat16."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        out_f, in_f = weight.shape
        w = weight.detach().float().view(out_f, in_f // INT4_GROUP, INT4_GROUP)
        lo, hi = w.amin(dim=-1), w.amax(dim=-1)
        scale = ((hi - lo) / 15).clamp(min=torch.finfo(torch.float32).tiny).to(ACTIVATION)
        zero = (lo + 8 * scale.float()).to(ACTIVATION)  # torch's zero point: the level-8 value
        s, z = scale.float()[..., None], zero.float()[..., None]
        q = torch.round((w - z) / s + 8).clamp(0, 15).to(torch.int32).view(out_f, in_f)
        self.register_buffer("qweight", torch._convert_weight_to_int4pack_for_cpu(q, 1))
        self.register_buffer("scale_zero", torch.stack((scale.t(), zero.t()), -1).contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int4pack_mm_for_cpu(x.to(self.scale_zero.dtype).contiguous(), self.qweight,
                                              INT4_GROUP, self.scale_zero)
        return y if self.bias is None else y + self.bias


def supported(fmt: str, weight: torch.Tensor) -> bool:
    """Whether torch's kernel takes this shape (out of its range it crashes or returns inf:
    int8 needs in % 16, int4 out % 16 and in % INT4_GROUP)."""
    out_f, in_f = weight.shape
    if fmt in NATIVE:
        return native_linear.supported(weight)
    if fmt == "bf16":  # a plain matmul: any shape, any device
        return True
    if weight.device.type != "cpu":
        return False
    if fmt == "int8":
        return in_f % 16 == 0
    return out_f % 16 == 0 and in_f % INT4_GROUP == 0


def quantize_linear(fmt: str, weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Module | None:
    """The `fmt` form of a linear layer, or None where the kernel cannot take its shape."""
    if fmt not in QUANTIZED:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, not {fmt!r}")
    if not supported(fmt, weight):
        return None
    return {"bf16": Bf16Linear, "int8": Int8Linear, "int4": Int4Linear, "q4": native_linear.Q4Linear,
            "q8": native_linear.Q8Linear}[fmt](weight, bias)


def weights_label(model_name: str, fmt: str) -> str:
    """The model's name in the KV store for weights `fmt`: dense KV keeps the plain name (dense
    is today's numbers), another format's KV is another model's (bf16: `name:bf16`)."""
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_FORMATS)}, not {fmt!r}")
    return model_name if fmt == "dense" else f"{model_name}:{fmt}" + (
        f"-g{INT4_GROUP}" if fmt in ("int4", "q4") else "") + (
        f"-r{native_linear.REVISION}" if fmt == "q4" else "")
