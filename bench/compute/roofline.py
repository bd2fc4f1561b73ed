"""The decode roofline, as arithmetic: a decode step is memory-bound (each weight is read once
per step, each sequence's K/V once per token), so tokens/s x bytes read per token can at best
reach the machine's read bandwidth."""
from __future__ import annotations


def gbps(nbytes: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    return nbytes / seconds / 1e9


def decode_bytes_per_token(weight_bytes: int, kv_bytes_per_token: int,
                           context_tokens: float) -> float:
    """Bytes one decoded token reads at batch 1: every weight once, plus the K/V of the
    `context_tokens` it attends over."""
    return weight_bytes + kv_bytes_per_token * context_tokens


def roofline_fraction(bytes_per_token: float, tokens_per_s: float, read_gbps: float) -> float:
    """Share of the read bandwidth that decoding at `tokens_per_s` uses (1.0: at the roofline)."""
    if read_gbps <= 0:
        raise ValueError(f"read bandwidth must be positive, got {read_gbps} GB/s")
    return bytes_per_token * tokens_per_s / (read_gbps * 1e9)
