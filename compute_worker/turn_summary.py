"""What a finished turn reports (the edge copies it into the wire's TurnSummary)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TurnSummary:
    prompt_tokens: int
    cached_tokens: int  # prompt tokens whose KV was restored, not computed
    completion_tokens: int
    kv_tier: int  # where the restored KV came from (TIER_*)
    kv_format: int  # KV_FORMAT_* of the restored KV (UNSPECIFIED: none)
    ttft_s: float  # arrival at the scheduler -> first token
    queue_s: float  # waiting in the scheduler
    kv_load_s: float  # reading (and converting) the KV
    convert_s: float  # tensor 6 -> K/V
    finish_reason: str  # stop | length
    latency_s: float  # arrival -> the turn's end
    recomputed_tokens: int = 0  # stored tokens recomputed, not read (a reversed split)
    respelt_tokens: int = 0  # answer tokens recomputed as the next turn spells them (respell.py)


@dataclass(frozen=True)
class PromptCounts:
    """Known once the KV is restored, before the first token: the wire sends them on the
    turn's first event."""
    prompt_tokens: int
    cached_tokens: int
