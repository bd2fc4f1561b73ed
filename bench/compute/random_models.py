"""Random-weight models of a given shape and random prompts (no download): timing, not quality."""
from __future__ import annotations

import torch

from compute_worker.models import ModelConfig, build_model

OPT_125M_SHAPE = dict(arch="opt", vocab_size=50272, hidden_size=768, intermediate_size=3072,
                      num_layers=12, num_heads=12, num_kv_heads=12, head_dim=64,
                      max_position=2048, hidden_act="relu", name="opt-125m-shape-random")


def random_model(shape: dict, seed: int = 0):
    torch.manual_seed(seed)
    model = build_model(ModelConfig(**shape), device="cpu", dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.02 * torch.randn_like(p))
    return model


def random_ids(vocab_size: int, n: int, generator: torch.Generator) -> list[int]:
    """`n` token ids in [100, 1000) (plain tokens of a real vocabulary), or in the upper half
    of a tiny one."""
    hi = min(1000, vocab_size)
    return torch.randint(min(100, hi // 2), hi, (n,), generator=generator).tolist()
