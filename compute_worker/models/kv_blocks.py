"""Which models compute their KV in aligned blocks, and how big a block is (a pure rule).

In bfloat16 a matmul's output is rounded to 8 bits of mantissa, so the last-bit differences that
attention's kernels make between chunkings (a prefix prefilled in one pass, or as a prompt and
then token by token) become whole bf16 steps, and greedy answers from restored KV drift from a
recompute's. Where the linears give a row the same bits whatever rows run beside it (a CPU's,
as loaders/row_probe.py checks), attention is the one place where the chunking shows. With blocks, a block's KV is final only
once it was computed as one block-aligned prefill (attention.py); a decode that completes a
block recomputes it so (sequence.py), and a restored prefix is cut to whole blocks
(turn_runner.py): every stored block was then computed the one way a recompute computes it.
Float32 with dense weights needs none of this: its answers match recompute as they are.
"""
from __future__ import annotations

import torch

BLOCK = 32  # positions per block: a turn recomputes at most 31 restored tokens; a 1,000-token
# prefill runs 32 attention calls a layer instead of 2 (a few % of a bf16 prefill here)


def kv_block(dtype: torch.dtype, weights: str, native: bool = False) -> int:
    """Block size for a model in `dtype` whose linears are in format `weights` (0: none).
    Formats other than dense round every matmul input (quant.py: to bf16; q4: to int8). A model
    run by the native forward (q4 Llama, float32: native_forward.py) computes every row alone, so
    its chunkings agree bit for bit as float32 dense's do."""
    exact = dtype == torch.float32 and (weights == "dense" or (weights == "q4" and native))
    return 0 if exact else BLOCK


def whole_blocks(tokens: int, block: int) -> int:
    """The longest prefix of `tokens` positions made of whole blocks."""
    return tokens - tokens % block if block else tokens


def covering_blocks(tokens: int, block: int) -> int:
    """The shortest prefix of whole blocks that holds `tokens` positions."""
    return -(-tokens // block) * block if block else tokens
