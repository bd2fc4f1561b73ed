"""Whether a worker reuses KV stored in another dtype than its own: convert it, or recompute.

KV written in one dtype is never taken as another. Per direction:
- float32 KV, a narrower worker (bf16, fp16): convert, rounding to nearest. Those values are
  closer to exact than the worker's own would be, so its answers stay within its dtype's
  tolerance (docs/engine.md, "Choosing the dtype"), and the prefix is not recomputed.
- narrower KV, a float32 worker: recompute. A float32 worker's answers equal its own recompute
  token for token; KV computed in bf16 cannot keep that promise.
- bf16 <-> fp16, or a dtype the store never recorded (writers from before dtypes were kept; CUDA
  workers wrote bf16 then): recompute.
"""
from __future__ import annotations

from compute_worker.kv_codec import FLOAT32

USE, CONVERT, RECOMPUTE = "use", "convert", "recompute"


def reuse_action(stored: int, mine: int) -> str:
    """What a worker whose KV dtype is `mine` does with KV stored as `stored` (KV_DTYPE_*)."""
    if stored == mine:
        return USE
    return CONVERT if stored == FLOAT32 else RECOMPUTE
