"""Query token ids: seeded, reproducible, never a special token.

Ids come from [low, high): the default [100, 32000) avoids the control tokens of SmolLM2 (0-16),
Llama 2 (0-2), OPT (0-3) and the high-numbered specials of Llama 3 / Qwen2, and lies inside all
their vocabularies. Random ids are real model input; only their meaning is lost, which a
benchmark that fixes answer lengths (max_tokens + ignore_eos) does not need.
"""
from __future__ import annotations

import random

DEFAULT_TOKEN_RANGE = (100, 32000)


def query_tokens(seed: int, user: int, index: int, n: int,
                 token_range: tuple[int, int] = DEFAULT_TOKEN_RANGE) -> list[int]:
    """The `n` ids of the `index`-th query of `user`: the same on every run and every system."""
    low, high = token_range
    if not 0 <= low < high:
        raise ValueError(f"bad token range {token_range}")
    rng = random.Random(f"{seed}/{user}/{index}")  # str seeds hash deterministically
    return [rng.randrange(low, high) for _ in range(n)]
