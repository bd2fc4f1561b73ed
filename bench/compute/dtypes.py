"""The model in another dtype, and prefill throughput in it."""
from __future__ import annotations

import copy
import statistics
import time

import torch

from bench.compute.random_models import random_ids

ENGINE_PREFILL_CHUNK = 512  # Engine's default max_prefill_tokens: a long prompt runs in chunks


def cast_copy(model, dtype: torch.dtype):
    """A copy of `model` in `dtype` (the original is left as it is) and "", or None and why it
    cannot run in that dtype here: one short forward must give finite logits."""
    try:
        other = copy.deepcopy(model).to(dtype)
        ids = torch.tensor(random_ids(model.config.vocab_size, 8, torch.Generator().manual_seed(1)))
        out = other.forward([(ids, other.new_cache(16))], logits_last_only=True)[0]
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if not torch.isfinite(out.logits).all():
        return None, "the forward pass gives non-finite logits"
    return other, ""


def prefill_tokens_per_s(model, tokens: int = 1000, repeat: int = 3,
                         chunk: int = ENGINE_PREFILL_CHUNK) -> float:
    """Prompt tokens per second for one `tokens`-long prompt into an empty cache, in chunks of
    `chunk` as the engine runs it (median of `repeat`, after a short warm-up)."""
    gen = torch.Generator().manual_seed(5)
    ids = torch.tensor(random_ids(model.config.vocab_size, tokens, gen))
    model.forward([(ids[:32], model.new_cache(32))], logits_last_only=True)
    times = []
    for _ in range(repeat):
        cache = model.new_cache(tokens)
        start = time.perf_counter()
        for at in range(0, tokens, chunk):
            out = model.forward([(ids[at:at + chunk], cache)], logits_last_only=True)[0]
        float(out.logits[0, 0])  # waits for an accelerator too
        times.append(time.perf_counter() - start)
    assert cache.length == tokens
    return tokens / statistics.median(times)
