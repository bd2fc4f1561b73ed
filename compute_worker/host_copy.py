"""Host tensor -> device tensor, through pinned memory when the device is a GPU.

A copy from pageable memory is staged by the driver through its own pinned buffer, in pieces,
and blocks; from pinned memory it is one DMA at the bus's rate that the host does not wait for
(later work on the same stream is ordered after it). torch's caching host allocator reuses the
pinned block once the copy that used it has finished, so a restore pays no pinning per call.
"""
from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """`host` (a CPU tensor) on `device`: the same tensor on the CPU, a non-blocking copy out of a
    pinned staging buffer on CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    staged = torch.empty(host.shape, dtype=host.dtype, pin_memory=True)
    staged.copy_(host)
    return staged.to(device, non_blocking=True)
