"""Next-token choice: greedy at temperature 0 (reproducible), else seeded sampling."""
from __future__ import annotations

import torch


class Sampler:
    def __init__(self, temperature: float = 0.0, seed: int = 0):
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        self.temperature = temperature
        self.generator = None
        if temperature > 0:
            self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, logits: torch.Tensor) -> int:
        """logits [vocab] -> token id."""
        if self.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float().cpu() / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
