"""Our AVX2 kernels (compute_worker/native/q4_kernels.cpp) against a float64 restatement of their
math, the row independence that keeps restored answers equal to recomputed ones, bad input, and
the fallback to torch's kernels when the build fails (a real failed build, in a subprocess)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from compute_worker import native
from compute_worker.models.native_linear import GROUP, Q4Linear, Q8Linear, kernel_layout, pack_q4


def unpack_q4(packed: torch.Tensor, scale_min: torch.Tensor) -> torch.Tensor:
    """The float32 weight a q4 linear multiplies by: pack_q4's layout read back."""
    out_f = packed.shape[0]
    p = packed.view(out_f, -1, GROUP // 2)
    q = torch.cat((p & 0x0F, p >> 4), dim=-1).float()
    return (q * scale_min[..., :1].float() + scale_min[..., 1:].float()).view(out_f, -1)


def quantized_input(x: torch.Tensor) -> torch.Tensor:
    """x as the kernels see it: int8 per group of 32, scale max|x| / 127, rounded to nearest."""
    g = x.double().view(x.shape[0], -1, 32)
    d = g.abs().amax(-1, keepdim=True) / 127
    return (torch.round(g / d.where(d > 0, 1)) * d).view_as(x)


@pytest.fixture(scope="module")
def ops():
    assert native.ops() is not None, native.why_not()  # CI's machine builds them (make setup)
    return native.ops()


def test_q4_is_the_grouped_integer_product(ops):
    torch.manual_seed(0)
    w, x = torch.randn(100, 96), torch.randn(7, 96) * 3  # 100: a partial last block of 8
    x[2, :32] = 0  # an all-zero group: scale 0, no division by it
    packed, scale_min = pack_q4(w)
    y = ops.q4_linear(x, *kernel_layout(packed, scale_min), 100)
    want = quantized_input(x) @ unpack_q4(packed, scale_min).double().t()
    assert (y.double() - want).abs().max() < 1e-5 * want.abs().max()
    # and near the float product: the int4 weights' error, not a wrong layout
    assert (y - x @ w.t()).abs().max() < 0.15 * (x @ w.t()).abs().max()


def test_q4_packing_keeps_a_q4_1_grid_exactly():
    torch.manual_seed(1)
    levels = torch.randint(0, 16, (16, 64)).float()
    levels[:, ::32], levels[:, 31::32] = 0, 15  # every group spans 0..15, as GGUF's blocks do
    scale = (torch.rand(16, 2, 1) + 0.01).half().float()
    low = torch.randn(16, 2, 1).half().float()
    w = (levels.view(16, 2, 32) * scale + low).view(16, 64)
    packed, scale_min = pack_q4(w)
    assert torch.equal(unpack_q4(packed, scale_min), w)


def test_q8_is_the_grouped_integer_product(ops):
    torch.manual_seed(2)
    w, x = torch.randn(50, 64), torch.randn(3, 64)
    layer = Q8Linear(w, None)
    want = quantized_input(x) @ (layer.qweight.double() * layer.scale.double()[:, None]).t()
    assert (layer(x).double() - want).abs().max() < 1e-5 * want.abs().max()


@pytest.mark.parametrize("make", [Q4Linear, Q8Linear])
def test_a_rows_bits_do_not_depend_on_its_batch_or_threads(ops, make):
    torch.manual_seed(3)
    layer = make(torch.randn(333, 128), torch.randn(333))  # 333: a partial last column block
    x = torch.randn(9, 128)
    together = layer(x)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([layer(x[i:i + 1]) for i in range(9)])
    finally:
        torch.set_num_threads(before)
    assert torch.equal(together, alone)


def test_the_kernel_layout_holds_every_level_scale_and_min_in_place():
    torch.manual_seed(2)
    packed, scale_min = pack_q4(torch.randn(13, 64))  # two blocks of 8, the second padded
    qweight, sm = kernel_layout(packed, scale_min)
    assert qweight.shape == (2, 64 * 4) and sm.shape == (2, 2, 2, 8)
    b = qweight.view(2, 2, 4, 8, 4)  # block, group, j, column, i: inputs 4j + i and 4j + 16 + i
    levels = torch.cat((b & 0x0F, b >> 4), 2).permute(0, 3, 1, 2, 4).reshape(16, 64)
    p = packed.view(13, 2, 16)
    assert torch.equal(levels[:13], torch.cat((p & 0x0F, p >> 4), -1).view(13, 64))
    scales = sm.permute(0, 3, 1, 2).reshape(16, 2, 2)
    assert torch.equal(scales[:13], scale_min)
    assert not levels[13:].any() and not scales[13:].float().any()  # padding computes zeros


def test_bad_input_is_refused_with_a_message(ops):
    qweight, scale_min = kernel_layout(*pack_q4(torch.randn(16, 64)))
    with pytest.raises(RuntimeError, match="float32"):
        ops.q4_linear(torch.randn(2, 64, dtype=torch.float64), qweight, scale_min, 16)
    with pytest.raises(RuntimeError, match="columns"):
        ops.q4_linear(torch.randn(2, 32), qweight, scale_min, 16)
    with pytest.raises(RuntimeError, match="scale_min"):
        ops.q4_linear(torch.randn(2, 64), qweight, scale_min[:1], 16)
    with pytest.raises(RuntimeError, match="blocks of 8 columns for 17 outputs"):
        ops.q4_linear(torch.randn(2, 64), qweight, scale_min, 17)


def test_a_failed_build_falls_back_to_torchs_int4_and_refuses_q4(tmp_path):
    code = ("from compute_worker import native\n"
            "from compute_worker.models.prepare import resolve_weights\n"
            "print(native.ops() is None, resolve_weights('auto', 'cpu')[0])\n"
            "try:\n    resolve_weights('q4', 'cpu')\nexcept ValueError as e:\n    print(e)\n")
    env = {**os.environ, "BIDAW_NATIVE_DIR": str(tmp_path), "CXX": "/bin/false"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    assert out[0] == "True int4"
    assert out[1].startswith("weights q4 needs the native kernels: "
                             "the native kernels did not build")
