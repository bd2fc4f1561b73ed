"""Which dtype the worker runs its model (and so its KV) in: `--dtype auto|float32|bfloat16`.

`auto` picks bfloat16 on CUDA and float32 on every CPU. A CPU whose matrix units run bf16
natively (AMX-BF16 or AVX512-BF16) prefills 2.7x faster in bf16, but there answers from
restored KV equal recompute in only 60% of seeded conversations in bf16 throughout and 80%
with float32 activations around bf16 matmuls (`--weights bf16`), short of the >= 95% the
project holds reuse to (`bidaw bench exactness`, docs/engine.md "Choosing the dtype"); float32
matches in all of them. So bf16 on a CPU is an explicit choice (`--dtype bfloat16` or
`--weights bf16`), and elsewhere bf16 would be emulated and slower anyway. The choice is a
pure function of the device and the CPU's flags (testable anywhere); `cpu_flags` reads them
from /proc/cpuinfo.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from compute_worker.config import DTYPE_CHOICES

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # DTYPE_CHOICES but auto
# Flags of a CPU whose bf16 dot products run in hardware, by what the kernels gain from them.
BF16_CPU_FLAGS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"))


@dataclass(frozen=True)
class DtypeChoice:
    dtype: torch.dtype
    reason: str  # one line for the start-up log

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def choose_dtype(requested: str, device_type: str, cpu_flags: frozenset[str]) -> DtypeChoice:
    """The dtype for `--dtype requested` on `device_type` ("cuda" or "cpu")."""
    if requested in DTYPES:
        return DtypeChoice(DTYPES[requested], "--dtype " + requested)
    if requested != "auto":
        raise ValueError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)}, "
                         f"not {requested!r}")
    if device_type == "cuda":
        return DtypeChoice(torch.bfloat16, "auto: CUDA runs bf16 natively, half the KV bytes")
    for flag, label in BF16_CPU_FLAGS:
        if flag in cpu_flags:
            return DtypeChoice(torch.float32, f"auto: float32, exact KV reuse (the CPU's {label} "
                               f"matrix units prefill bf16 faster, but restored-KV answers "
                               f"would match recompute in only 60-80%: --dtype bfloat16 or "
                               f"--weights bf16 to choose them)")
    return DtypeChoice(torch.float32, "auto: the CPU has no AMX-BF16 or AVX512-BF16 "
                                      "(bf16 would be emulated, slower than fp32)")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is missing: not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()
