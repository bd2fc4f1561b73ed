"""Next-token choice: logit_bias, vLLM's repetition_penalty and OpenAI's penalties on the
logits, the end-of-sequence tokens barred until min_tokens, then greedy (temperature 0,
reproducible) or seeded sampling from what min_p, top_k and top_p keep; in JSON mode only a
token the grammar allows (json_constraint.py).

The logit rules are pure functions over one step's logits so that they can be checked on
hand-made tensors; `Sampler` keeps the per-answer state (the generator, the tokens so far).
"""
from __future__ import annotations

from collections import Counter

import torch

from compute_worker.json_constraint import JsonConstraint
from compute_worker.logprobs import MAX_TOP_LOGPROBS, StepLogprobs, step_logprobs
from compute_worker.prompt import TurnError

MAX_BIAS = 100.0  # OpenAI's logit_bias range
REDRAWS = 64  # JSON mode: draws of a sampled token before the likeliest allowed one is taken


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


def repetition_penalized(logits: torch.Tensor, seen: torch.Tensor,
                         penalty: float) -> torch.Tensor:
    """vLLM's (and Hugging Face's) repetition penalty: each token marked in `seen` (a bool mask
    over the vocabulary: the prompt's tokens and the answer's so far) has its logit divided by
    `penalty` when positive, multiplied by it otherwise; 1 leaves the logits as they are."""
    if penalty == 1:
        return logits
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, scaled, logits)


def finite_top(logits: torch.Tensor) -> torch.Tensor:
    """+inf (a tiny temperature or repetition_penalty overflowing float32: 1e-40 divides
    every positive logit into it) set to the dtype's largest: softmax gives such tokens the
    mass, shared, where inf - inf made NaN and sampling failed the turn (INTERNAL)."""
    return logits.clamp(max=torch.finfo(logits.dtype).max)


def min_p_kept(probs: torch.Tensor, min_p: float) -> torch.Tensor:
    """vLLM's min_p: the probabilities with every token below min_p times the largest set to 0
    (not renormalised: sampling draws in proportion); 0 keeps them all."""
    if min_p <= 0:
        return probs
    return torch.where(probs < min_p * probs.max(), torch.zeros_like(probs), probs)


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
                 eos: list[int] | tuple = (), repetition_penalty: float = 1.0,
                 min_p: float = 0.0, prompt: list[int] | tuple = (),
                 logprobs: int | None = None, constraint: JsonConstraint | None = None):
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
        self.repetition = repetition_penalty
        self.min_p = min_p
        # the repetition penalty's tokens: the prompt's, then each chosen one (a mask built at
        # the first step, on the logits' device and size)
        self._prompt = list(prompt) if repetition_penalty != 1 else []
        self._seen: torch.Tensor | None = None
        self.logprobs = logprobs  # None: off; else how many top tokens to give (logprobs.py)
        self.last_logprobs: StepLogprobs | None = None  # the last chosen token's, if asked
        self.constraint = constraint  # JSON mode: tokens it refuses are never chosen
        self.generator = None
        if temperature > 0:
            self.generator = torch.Generator().manual_seed(seed)

    @classmethod
    def for_turn(cls, turn, vocab_size: int, eos: list[int] | tuple = (),
                 prompt: list[int] | tuple = (), speller=None) -> "Sampler":
        """The turn's sampling knobs, checked; bad ones are the caller's error (TurnError).
        `eos`: the model's end-of-sequence ids, barred before the turn's min_tokens; `prompt`:
        its token ids (the repetition penalty's first tokens); `speller`: token ids to bytes
        (logprobs.TokenSpeller), which JSON mode needs."""
        bad = [t for t in turn.logit_bias if not 0 <= t < vocab_size]
        if bad:
            raise TurnError(f"logit_bias token id {bad[0]} is outside the vocabulary "
                            f"[0, {vocab_size})")
        if any(abs(b) > MAX_BIAS for b in turn.logit_bias.values()):
            raise TurnError(f"logit_bias values must lie in [-{MAX_BIAS:g}, {MAX_BIAS:g}]")
        if not 0 <= turn.top_p <= 1:
            raise TurnError(f"top_p {turn.top_p} is outside [0, 1]")
        if not 0 <= turn.repetition_penalty <= 2:  # (0: unset, off)
            raise TurnError(f"repetition_penalty {turn.repetition_penalty:g} is outside (0, 2]")
        if not 0 <= turn.min_p <= 1:
            raise TurnError(f"min_p {turn.min_p:g} is outside [0, 1]")
        if turn.top_logprobs > MAX_TOP_LOGPROBS:
            raise TurnError(f"top_logprobs {turn.top_logprobs} is above {MAX_TOP_LOGPROBS}")
        if turn.json_object and (speller is None or speller.tokenizer is None):
            raise TurnError("JSON mode needs the model's tokenizer (this worker has none)")
        eos = [t for t in eos if t < vocab_size]
        return cls(turn.temperature, turn.seed, top_p=turn.top_p or 1.0, top_k=turn.top_k,
                   presence_penalty=turn.presence_penalty,
                   frequency_penalty=turn.frequency_penalty, logit_bias=dict(turn.logit_bias),
                   min_tokens=turn.min_tokens, eos=eos,
                   repetition_penalty=turn.repetition_penalty or 1.0, min_p=turn.min_p,
                   prompt=prompt, logprobs=turn.top_logprobs if turn.logprobs else None,
                   constraint=JsonConstraint(speller, eos) if turn.json_object else None)

    def adjusted(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits after bias, penalties and the minimum length: what greedy and sampling
        both choose from."""
        logits = biased(logits.float(), self.bias)
        if self.repetition != 1:
            logits = repetition_penalized(logits, self._seen_mask(logits), self.repetition)
        logits = penalized(logits, self.counts, self.presence, self.frequency)
        if self.min_tokens and self.counts.total() < self.min_tokens:
            logits = barred(logits, self.eos)
        return logits

    def __call__(self, logits: torch.Tensor) -> int:
        """logits [vocab] -> token id (and its logprobs in last_logprobs, when asked)."""
        adjusted = self.adjusted(logits)
        token = self._choose(adjusted)
        if self.constraint is not None:
            if not self.constraint.allows(token):
                token = self._constrained(adjusted, token)
            self.constraint.accept(token)
        if self.logprobs is not None:
            self.last_logprobs = step_logprobs(logits, token, self.logprobs)
        self.counts[token] += 1
        if self._seen is not None:
            self._seen[token] = True
        return token

    def _seen_mask(self, logits: torch.Tensor) -> torch.Tensor:
        if self._seen is None:
            self._seen = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
            ids = [t for t in self._prompt + list(self.counts) if 0 <= t < len(self._seen)]
            if ids:
                self._seen[torch.tensor(ids, device=logits.device)] = True
        return self._seen

    def _constrained(self, logits: torch.Tensor, refused: int) -> int:
        """A token the constraint allows: greedy, the likeliest; sampling, drawn again with each
        refused token's logit at -inf (a bounded number of times, then the likeliest)."""
        masked = logits.clone()
        for _ in range(REDRAWS if self.temperature > 0 else 0):
            masked[refused] = -torch.inf
            if not torch.isfinite(masked).any():
                break
            refused = self._choose(masked)
            if self.constraint.allows(refused):
                return refused
        for token in torch.argsort(logits, descending=True).tolist():
            if self.constraint.allows(token):
                return token
        raise TurnError("JSON mode: no token of the vocabulary continues the answer")

    def _choose(self, logits: torch.Tensor) -> int:
        if self.temperature == 0:
            return int(torch.argmax(logits))
        probs = min_p_kept(torch.softmax(finite_top(logits.cpu() / self.temperature), dim=-1),
                           self.min_p)
        if self.top_k <= 0 and self.top_p >= 1:
            return int(torch.multinomial(probs, 1, generator=self.generator))
        order, kept = nucleus(probs, self.top_k, self.top_p)
        return int(order[torch.multinomial(kept, 1, generator=self.generator)])
