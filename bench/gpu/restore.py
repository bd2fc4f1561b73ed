"""The restore side on the device: tensor 6 -> K/V conversion, and stored K/V bytes -> device
tensors against the bus's pinned-copy limit."""
from __future__ import annotations

import statistics
import time

import torch

from bench.compute.roofline import gbps
from compute_worker import kv_codec
from compute_worker.host_copy import to_device

TOKENS = 1000  # the paper quotes tensor-6 conversion per 1,000 tokens of OPT-13B: tens of ms
REPEAT = 5


def _seconds(fn, device: torch.device, repeat: int = REPEAT) -> list[float]:
    """Wall time of `fn` until the device has finished it, `repeat` times after one warm-up
    (which also fills torch's pinned-block cache)."""
    def once() -> float:
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        return time.perf_counter() - start
    once()
    return [once() for _ in range(repeat)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def tensor6_to_kv(model, tokens: int = TOKENS) -> dict:
    """Milliseconds per 1,000 tokens to turn tensor 6 into K/V: on the device (the K and V
    projections of every layer), and from the store's bytes (host copy included)."""
    cfg, device = model.config, model.device
    hidden6 = 0.1 * torch.randn(tokens, cfg.num_layers, cfg.hidden_size, device=device,
                                dtype=model.dtype)
    on_device = statistics.median(_seconds(lambda: model.kv_from_hidden6(hidden6, 0), device))
    data = kv_codec.to_bytes(hidden6)
    from_bytes = statistics.median(_seconds(
        lambda: kv_codec.kv_from_bytes(model, kv_codec.TENSOR6, data, model.dtype), device))
    per_1k = 1000 / tokens * 1000
    return {"tokens": tokens, "tensor6_bytes": len(data),
            "ms_per_1k_tokens": on_device * per_1k,
            "from_stored_bytes_ms_per_1k_tokens": from_bytes * per_1k}


def kv_host_to_device(model, tokens: int = TOKENS) -> dict:
    """GB/s of `tokens` tokens of stored K/V reaching the device: the whole restore from bytes
    (kv_codec.kv_from_bytes), its host->device copy alone (host_copy.to_device), and on CUDA a
    plain copy of the same size from pageable memory and from pinned memory (the limit)."""
    cfg, device = model.config, model.device
    shape = (tokens, cfg.num_layers, 2, cfg.num_kv_heads, cfg.head_dim)
    size = torch.empty((), dtype=model.dtype).element_size()
    n = tokens * cfg.kv_bytes_per_token(size)
    raw = torch.randint(0, 128, (n,), dtype=torch.uint8)  # any bits: only the bytes move
    data = raw.numpy().tobytes()
    best = lambda fn: min(_seconds(fn, device))  # noqa: E731
    out = {"tokens": tokens, "bytes": n,
           "kv_from_bytes_gbps": gbps(n, best(lambda: kv_codec.kv_from_bytes(model, kv_codec.KV,
                                                                              data, model.dtype)))}
    if device.type != "cuda":
        out["pinned_limit_gbps"] = None
        out["note"] = "no CUDA device: the copy is the CPU tensor itself, pinned memory needs one"
        return out
    host = raw.view(model.dtype).view(shape)
    pageable = raw.clone()
    pinned = raw.pin_memory()
    out["to_device_gbps"] = gbps(n, best(lambda: to_device(host, device)))
    out["pageable_copy_gbps"] = gbps(n, best(lambda: pageable.to(device)))
    out["pinned_limit_gbps"] = limit = gbps(n, best(lambda: pinned.to(device, non_blocking=True)))
    out["to_device_fraction_of_limit"] = out["to_device_gbps"] / limit
    out["kv_from_bytes_fraction_of_limit"] = out["kv_from_bytes_gbps"] / limit
    return out
