"""Next-token choice: OpenAI's penalties and logit_bias on the logits, the end-of-sequence
tokens barred until min_tokens, then greedy (temperature 0, reproducible) or seeded sampling
from the top_k / top_p nucleus.

The logit rules are pure functions over one step's logits so that they can be checked on
hand-made tensors; `Sampler` keeps the per-answer state (the generator, the tokens so far).
"""
from __future__ import annotations

from collections import Counter

import torch

from compute_worker.prompt import TurnError

MAX_BIAS = 100.0  # OpenAI's logit_bias range


def penalized(logits: torch.Tensor, counts: Counter, presence: float,
              frequency: float) -> torch.Tensor:
    """OpenAI: logit[j] -= count[j] * frequency + (count[j] > 0) * presence, over the tokens
    generated so far in this answer."""
    if not counts or (presence == 0 and frequency == 0):
        return logits
    ids = torch.tensor(list(counts), device=logits.device)
    n = torch.tensor(list(counts.values()), dtype=logits.dtype, device=logits.device)
    out = logits.clone()
    out[ids] -= n * frequency + presence
    return out


def biased(logits: torch.Tensor, bias: dict[int, float]) -> torch.Tensor:
    if not bias:
        return logits
    out = logits.clone()
    out[torch.tensor(list(bias), device=logits.device)] += torch.tensor(
        list(bias.values()), dtype=logits.dtype, device=logits.device)
    return out


def barred(logits: torch.Tensor, ids: list[int]) -> torch.Tensor:
    """`ids` made impossible to choose (vLLM's min_tokens: no end before the minimum)."""
    if not ids:
        return logits
    out = logits.clone()
    out[torch.tensor(ids, device=logits.device)] = -torch.inf
    return out


def nucleus(probs: torch.Tensor, top_k: int, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens sampling may choose, most likely first, and their renormalised probabilities:
    the top_k most likely (0: all), then the smallest prefix whose mass reaches top_p."""
    sorted_probs, order = torch.sort(probs, descending=True)
    if 0 < top_k < len(sorted_probs):
        sorted_probs, order = sorted_probs[:top_k], order[:top_k]
    if 0 < top_p < 1:
        sorted_probs = sorted_probs / sorted_probs.sum()
        before = torch.cumsum(sorted_probs, 0) - sorted_probs  # mass of the more likely ones
        keep = int((before < top_p).sum())  # always >= 1: the first has 0 before it
        sorted_probs, order = sorted_probs[:keep], order[:keep]
    return order, sorted_probs / sorted_probs.sum()


class Sampler:
    def __init__(self, temperature: float = 0.0, seed: int = 0, *, top_p: float = 1.0,
                 top_k: int = 0, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 logit_bias: dict[int, float] | None = None, min_tokens: int = 0,
                 eos: list[int] | tuple = ()):
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.presence = presence_penalty
        self.frequency = frequency_penalty
        self.bias = dict(logit_bias or {})
        self.min_tokens = min_tokens  # the eos ids are barred until this many are chosen
        self.eos = [t for t in eos if 0 <= t]
        self.counts: Counter = Counter()  # tokens chosen so far in this answer
        self.generator = None
        if temperature > 0:
            self.generator = torch.Generator().manual_seed(seed)

    @classmethod
    def for_turn(cls, turn, vocab_size: int, eos: list[int] | tuple = ()) -> "Sampler":
        """The turn's sampling knobs, checked; bad ones are the caller's error (TurnError).
        `eos`: the model's end-of-sequence ids, barred before the turn's min_tokens."""
        bad = [t for t in turn.logit_bias if not 0 <= t < vocab_size]
        if bad:
            raise TurnError(f"logit_bias token id {bad[0]} is outside the vocabulary "
                            f"[0, {vocab_size})")
        if any(abs(b) > MAX_BIAS for b in turn.logit_bias.values()):
            raise TurnError(f"logit_bias values must lie in [-{MAX_BIAS:g}, {MAX_BIAS:g}]")
        if not 0 <= turn.top_p <= 1:
            raise TurnError(f"top_p {turn.top_p} is outside [0, 1]")
        return cls(turn.temperature, turn.seed, top_p=turn.top_p or 1.0, top_k=turn.top_k,
                   presence_penalty=turn.presence_penalty,
                   frequency_penalty=turn.frequency_penalty, logit_bias=dict(turn.logit_bias),
                   min_tokens=turn.min_tokens, eos=[t for t in eos if t < vocab_size])

    def adjusted(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits after bias, penalties and the minimum length: what greedy and sampling
        both choose from."""
        logits = biased(logits.float(), self.bias)
        logits = penalized(logits, self.counts, self.presence, self.frequency)
        if self.min_tokens and self.counts.total() < self.min_tokens:
            logits = barred(logits, self.eos)
        return logits

    def __call__(self, logits: torch.Tensor) -> int:
        """logits [vocab] -> token id."""
        token = self._choose(self.adjusted(logits))
        self.counts[token] += 1
        return token

    def _choose(self, logits: torch.Tensor) -> int:
        if self.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.cpu() / self.temperature, dim=-1)
        if self.top_k <= 0 and self.top_p >= 1:
            return int(torch.multinomial(probs, 1, generator=self.generator))
        order, kept = nucleus(probs, self.top_k, self.top_p)
        return int(order[torch.multinomial(kept, 1, generator=self.generator)])
