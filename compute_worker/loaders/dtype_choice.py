"""Which dtype the worker runs its model (and so its KV) in: `--dtype auto|float32|bfloat16`.

`auto` picks bfloat16 on CUDA, and on a CPU with AMX-BF16 matrix units (Sapphire Rapids and
later) when its bf16 linears give a row the same bits whatever rows run beside it (row_probe.py,
asked at start): there bf16 prefills several times faster than float32, the KV is half the
bytes, and block-aligned KV (models/kv_blocks.py) keeps answers from restored KV equal to a
recompute's. Where the probe fails, bf16 answers would drift from recompute (59 of 100
seeded conversations matched on such a CPU before blocks), so auto keeps float32. A CPU with
AVX512-BF16 but no AMX, or neither, also gets float32: its bf16 speed is unmeasured, or bf16
would be emulated and slower. `--dtype bfloat16` chooses bf16 anywhere. The choice is a pure
function of the device, the CPU's flags and the probe's answer (testable anywhere);
`cpu_flags` reads the flags from /proc/cpuinfo.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from compute_worker.config import DTYPE_CHOICES

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # DTYPE_CHOICES but auto


@dataclass(frozen=True)
class DtypeChoice:
    dtype: torch.dtype
    reason: str  # one line for the start-up log

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def choose_dtype(requested: str, device_type: str, cpu_flags: frozenset[str],
                 rows_invariant: Callable[[], bool] = lambda: False) -> DtypeChoice:
    """The dtype for `--dtype requested` on `device_type` ("cuda" or "cpu"). `rows_invariant`:
    the probe (row_probe.py), asked only for an AMX-BF16 CPU under auto."""
    if requested in DTYPES:
        return DtypeChoice(DTYPES[requested], "--dtype " + requested)
    if requested != "auto":
        raise ValueError(f"--dtype must be one of {', '.join(DTYPE_CHOICES)}, "
                         f"not {requested!r}")
    if device_type == "cuda":
        return DtypeChoice(torch.bfloat16, "auto: CUDA runs bf16 natively, half the KV bytes")
    if "amx_bf16" in cpu_flags:
        if rows_invariant():
            return DtypeChoice(torch.bfloat16, "auto: the CPU's AMX-BF16 matrix units run bf16 "
                               "(faster prefill, half the KV bytes) and its bf16 linears are "
                               "row-invariant, so block-aligned KV keeps reuse exact")
        return DtypeChoice(torch.float32, "auto: float32, exact KV reuse (the CPU's AMX-BF16 "
                           "linears give a row other bits beside other rows, so bf16 answers "
                           "from restored KV would drift from recompute: --dtype bfloat16 to "
                           "choose it anyway)")
    if "avx512_bf16" in cpu_flags:
        return DtypeChoice(torch.float32, "auto: float32 (the CPU has AVX512-BF16 but no "
                           "AMX-BF16: bf16's speed there is unmeasured; --dtype bfloat16 to "
                           "choose it)")
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
