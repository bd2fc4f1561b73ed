"""How far each weight format's logits are from dense float32's (`bidaw bench quality`).

Seeded chat prompts (bench/exactness.py's first turns) are answered greedily by the dense model;
every format then reads the very same tokens (teacher forcing) and its next-token logits at each
generated position (the prompt's last token and the answer's) are set against dense's: the share
of positions whose top-1 token agrees, the mean KL divergence from dense's distribution, and how
many of the format's own greedy answers are dense's token for token (with where the others first
differ). Dense is the reference, so its own figures would be 1, 0 and all.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

import torch

from bench.exactness import first_difference, user_messages


@dataclass(frozen=True)
class Sample:
    prompt: list[int]
    answer: list[int]  # dense's greedy answer


@dataclass
class FormatQuality:
    weights: str
    positions: int = 0
    top1_agreement: float = 0.0   # share of positions whose argmax is dense's
    mean_kl: float = 0.0          # KL(dense || format) in nats, mean over positions
    same_answers: int = 0         # greedy answers equal to dense's token for token
    first_differences: list[int] = field(default_factory=list)  # answer token, the others

    def to_json(self) -> dict:
        differs = self.first_differences
        return {**asdict(self),
                "median_first_difference": statistics.median(differs) if differs else None}


@torch.inference_mode()
def greedy(model, prompt: list[int], max_tokens: int, stop: set[int]) -> list[int]:
    cache = model.new_cache(len(prompt) + max_tokens)
    logits = model.forward([(torch.tensor(prompt), cache)], logits_last_only=True)[0].logits
    answer: list[int] = []
    while len(answer) < max_tokens:
        token = int(torch.argmax(logits[-1]))
        answer.append(token)
        if token in stop:
            break
        logits = model.forward([(torch.tensor([token]), cache)], logits_last_only=True)[0].logits
    return answer


@torch.inference_mode()
def generated_logits(model, sample: Sample) -> torch.Tensor:
    """Log-probabilities [len(answer), vocab] of the positions that predict the answer's
    tokens, the whole sequence in one pass."""
    ids = sample.prompt + sample.answer[:-1]
    out = model.forward([(torch.tensor(ids), model.new_cache(len(ids)))],
                        logits_last_only=False)[0]
    return torch.log_softmax(out.logits[len(sample.prompt) - 1:].float(), dim=-1)


def samples(model, tokenizer, conversations: int, seed: int, max_tokens: int) -> list[Sample]:
    stop = set(tokenizer.eos_token_ids or ())
    out = []
    for index in range(conversations):
        text = user_messages(seed, index, 1)[0]
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}])
        out.append(Sample(prompt, greedy(model, prompt, max_tokens, stop)))
    return out


def compare(model, tokenizer, reference: list[Sample], dense_logprobs: list[torch.Tensor],
            max_tokens: int) -> FormatQuality:
    """`model` (in some weight format) against dense's samples and log-probabilities."""
    stop = set(tokenizer.eos_token_ids or ())
    report = FormatQuality(model.weights)
    agree = kl = 0.0
    for sample, dense in zip(reference, dense_logprobs):
        mine = generated_logits(model, sample)
        agree += float((mine.argmax(-1) == dense.argmax(-1)).sum())
        kl += float((dense.exp() * (dense - mine)).sum())
        report.positions += dense.shape[0]
        differs = first_difference(greedy(model, sample.prompt, max_tokens, stop), sample.answer)
        if differs is None:
            report.same_answers += 1
        else:
            report.first_differences.append(differs)
    report.top1_agreement = round(agree / report.positions, 4)
    report.mean_kl = round(kl / report.positions, 5)
    return report
