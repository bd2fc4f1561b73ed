"""What a loaded model runs as: its weight format (`weights`: dense | bf16 | int8 | int4 | auto)
and the fused projections every format shares."""
from __future__ import annotations

import torch
from torch import nn

from compute_worker import native
from compute_worker.config import WEIGHT_CHOICES
from compute_worker.models.base import CausalLM
from compute_worker.models.fuse import fuse_projections
from compute_worker.models.native_forward import NativeForward
from compute_worker.models.quant import quantize_linear

# The output projection in int4 moves SmolLM2's logits far more than its layers do (its GGUF keeps
# the embedding table finer than Q4_1: int4 is 9% off it, int8 1%), as llama.cpp's quantizers
# keep the output tensor finer too. bf16 keeps it dense: logits rounded to bf16 (a step of 0.125
# at 20) would tie often, and a tie's pick would depend on the chunk that computed it.
HEAD_FORMAT = {"int8": "int8", "int4": "int8", "q4": "q8"}


def resolve_weights(choice: str, device: torch.device | str,
                    cpu_capability: str | None = None) -> tuple[str, str]:
    """(format, why) for a `weights` choice on `device`. auto: the format that decodes fastest
    at batch 1 (`bidaw bench compute`, side by side on a 2-core AMD EPYC with AVX2: README's
    compute table): q4 on a CPU with AVX2 or AVX-512 where our kernels build
    (compute_worker/native), else int4 (torch's kernel); dense elsewhere, as on CUDA the dense
    bfloat16 matmuls are the fast path (the int kernels are CPU ones) and on other CPUs they are
    unmeasured. q4 also prefills about as fast as dense float32 there; int4 does not."""
    device = torch.device(device)
    if choice not in WEIGHT_CHOICES:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_CHOICES)}, not {choice!r}")
    if choice != "auto":
        if choice not in ("dense", "bf16") and device.type != "cpu":
            raise ValueError(f"weights {choice} runs on CPU only (torch's weight-only kernels "
                             f"used here are CPU ones); use dense on {device.type}")
        if choice == "q4" and native.ops() is None:
            raise ValueError(f"weights q4 needs the native kernels: {native.why_not()}")
        return choice, "asked for"
    if device.type != "cpu":
        return "dense", f"auto on {device.type}: dense (the weight-only kernels are CPU ones)"
    capability = cpu_capability or torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        return "dense", f"auto on a {capability} CPU: dense (int kernels unmeasured there)"
    if native.ops() is None:
        return "int4", (f"auto on an {capability} CPU: int4, torch's kernel (q4 decodes faster, "
                        f"but {native.why_not()})")
    return "q4", f"auto on an {capability} CPU: q4 decodes fastest (bidaw bench compute)"


def _quantize_children(module: nn.Module, fmt: str) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            quantized = quantize_linear(fmt, child.weight, child.bias)
            if quantized is not None:  # a shape the kernel cannot take stays dense
                setattr(module, name, quantized)


@torch.no_grad()
def prepare_model(model: CausalLM, choice: str = "dense") -> tuple[str, str]:
    """Fuse the model's projections and put its layers' linears in the chosen format and its
    output projection in HEAD_FORMAT's (none: dense), in place. Returns (format, why). The
    embedding table stays dense: a token reads one row of it."""
    fmt, why = resolve_weights(choice, model.device)
    if model.weights not in ("dense", fmt):
        raise ValueError(f"the model's weights are {model.weights} already, not {fmt}")
    if fmt == "bf16" and model.dtype != torch.float32:
        raise ValueError(f"weights bf16 is for a float32 model; this one is {model.dtype} "
                         f"(its dense weights are bf16 already)")
    fuse_projections(model)
    model.weights = fmt
    if fmt != "dense":
        for layer in model.layers:
            _quantize_children(layer, fmt)
        if fmt in HEAD_FORMAT:
            model.head = quantize_linear(HEAD_FORMAT[fmt], model.output_weight(), None)
    if fmt == "q4":
        model.native = NativeForward.build(model)
    return fmt, why
