"""The `q4` weight format's linears, run by our AVX2 kernels (compute_worker/native).

q4 is GGUF's Q4_1 layout in our own kernel: per group of 32 inputs, levels 0..15 with a float16
scale and min (w = q * scale + min; SmolLM2's GGUF ships Q4_1, so its levels map back exactly),
the output projection in int8 per output channel. Each matmul quantizes its input to int8 per
group of 32 (a float32 scale each) and multiplies integers, as llama.cpp does on the same file:
torch's int4 kernel widens every weight to float and runs at a third of the speed (docs/weights.md).
Input and output are float32; every row's result is independent of the rows beside it
(q4_kernels.cpp), so restored KV answers equal recomputed ones within the format.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from compute_worker import native

GROUP = 32
BLOCK = 8  # output columns the int4 kernel computes together
# The kernels' arithmetic (the order their sums round in): KV computed by another revision has
# other bits, so it is another model's in the store (quant.weights_label). 2: blocks of 8 columns.
REVISION = 2


def pack_q4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float -> (uint8 [N, K/2]: element j low nibble, j+16 high, per group;
    float16 [N, K/32, 2]: scale and min)."""
    out_f, in_f = weight.shape
    w = weight.detach().float().view(out_f, in_f // GROUP, GROUP)
    lo, hi = w.amin(dim=-1), w.amax(dim=-1)
    tiny = torch.finfo(torch.float16).tiny
    scale = ((hi - lo) / 15).clamp(min=tiny).half()  # levels from the float16 values kept
    low = lo.half()
    q = torch.round((w - low.float()[..., None]) / scale.float()[..., None]).clamp(0, 15)
    q = q.to(torch.uint8)
    packed = (q[..., :GROUP // 2] | (q[..., GROUP // 2:] << 4)).reshape(out_f, in_f // 2)
    return packed.contiguous(), torch.stack((scale, low), -1).contiguous()


def kernel_layout(packed: torch.Tensor,
                  scale_min: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """pack_q4's tensors in the kernel's layout (q4_kernels.cpp, above q4_tile): blocks of BLOCK
    columns, the last padded with zero levels, scales and mins (so its padding computes zeros);
    per group, byte 4c + i of vector j holds column c's levels of inputs 4j + i (low nibble) and
    4j + 16 + i (high). -> (uint8 [blocks, K * 4], float16 [blocks, K / 32, 2, BLOCK])."""
    out_f, groups = packed.shape[0], packed.shape[1] * 2 // GROUP
    blocks = -(-out_f // BLOCK)
    p = packed.view(out_f, groups, GROUP // 2)
    levels = F.pad(torch.cat((p & 0x0F, p >> 4), -1), (0, 0, 0, 0, 0, blocks * BLOCK - out_f))
    q = levels.view(blocks, BLOCK, groups, 8, 4)  # block, column, group, 4 inputs, input
    byte = (q[:, :, :, :4] | (q[:, :, :, 4:] << 4)).permute(0, 2, 3, 1, 4)  # [b, g, j, c, i]
    sm = F.pad(scale_min, (0, 0, 0, 0, 0, blocks * BLOCK - out_f))
    sm = sm.view(blocks, BLOCK, groups, 2).permute(0, 2, 3, 1)
    return byte.reshape(blocks, -1).contiguous(), sm.contiguous()


class _NativeLinear(nn.Module):
    def __init__(self, bias: torch.Tensor | None) -> None:
        super().__init__()
        if native.ops() is None:
            raise RuntimeError(f"weights q4 needs the native kernels: {native.why_not()}")
        self.bias = None if bias is None else nn.Parameter(bias.detach().float().clone(), False)

    def _run(self, op, x: torch.Tensor, *weights) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if flat.dtype != torch.float32 or not flat.is_contiguous():
            flat = flat.float().contiguous()
        y = op(flat, *weights).view(*shape[:-1], -1)
        y = y if self.bias is None else y + self.bias
        return y if x.dtype == torch.float32 else y.to(x.dtype)


class Q4Linear(_NativeLinear):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__(bias)
        qweight, scale_min = kernel_layout(*pack_q4(weight))
        self.out_features = weight.shape[0]
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale_min", scale_min)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(torch.ops.bidaw_native.q4_linear, x, self.qweight, self.scale_min,
                         self.out_features)


class Q8Linear(_NativeLinear):
    """w = q * scale per output channel (symmetric), the q4 format's output projection."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__(bias)
        w = weight.detach().float()
        scale = (w.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(
            torch.int8))
        self.register_buffer("scale", scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._run(torch.ops.bidaw_native.q8_linear, x, self.qweight, self.scale)


def supported(weight: torch.Tensor) -> bool:
    """The kernels take any number of outputs and inputs in whole groups, on the CPU."""
    return weight.device.type == "cpu" and weight.shape[1] % GROUP == 0
