"""The shapes the GPU check times (random weights, no download), and their tiny CPU stand-ins."""
from __future__ import annotations

import torch

from compute_worker.models import ModelConfig, build_model

OPT_13B = dict(arch="opt", vocab_size=50272, hidden_size=5120, intermediate_size=20480,
               num_layers=40, num_heads=40, num_kv_heads=40, head_dim=128, max_position=2048,
               hidden_act="relu", name="opt-13b-shape-random")
LLAMA3_8B = dict(arch="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                 num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128, max_position=8192,
                 rope_theta=500000.0, name="llama-3-8b-shape-random")
# --tiny: the same architectures (MHA OPT, GQA Llama) small enough for a CI runner's CPU
TINY_OPT = dict(OPT_13B, vocab_size=512, hidden_size=64, intermediate_size=128, num_layers=2,
                num_heads=4, num_kv_heads=4, head_dim=16, name="opt-tiny-random")
TINY_LLAMA = dict(LLAMA3_8B, vocab_size=512, hidden_size=64, intermediate_size=96, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=16, name="llama-tiny-random")


def shapes(tiny: bool) -> dict[str, dict]:
    return {"opt-13b": TINY_OPT if tiny else OPT_13B,
            "llama-3-8b": TINY_LLAMA if tiny else LLAMA3_8B}


@torch.no_grad()
def random_model_on(shape: dict, device: torch.device | str, dtype: torch.dtype, seed: int = 0):
    """bench/compute/random_models.py's random model, drawn where it runs: a 13B model built in
    float32 on the host first would need 52 GB and a minute of randn before the copy."""
    torch.manual_seed(seed)
    model = build_model(ModelConfig(**shape), device=device, dtype=dtype)
    for p in model.parameters():
        p.normal_(0.0, 0.02)
    return model.eval()
