"""Prompt logprobs (TurnRequest.prompt_logprobs): at each prompt position p >= 1, log_softmax of
the raw logits the model gives after positions 0..p-1, in float32 — the answer's rule
(logprobs.py) applied to the prompt. The engine hands over the head's input at every row of a
prefill chunk (ForwardOut.final); the logits are made CHUNK rows at a time, so a long prompt
never holds [positions, vocab] float32 at once (8,192 x 49,152 x 4 B would be 1.6 GB)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from compute_worker.logprobs import StepLogprobs

CHUNK = 64  # rows of logits at once: 64 x 49,152 x 4 B = 12.6 MB for SmolLM2


@dataclass(frozen=True)
class PromptLogprobs:
    start: int  # the prompt position of steps[0]
    steps: list[StepLogprobs]  # position 0's (nothing before it): logprob 0, no top


def chunk_logprobs(head, final: torch.Tensor, prompt: list[int], start: int, top: int,
                   threads: int = 0) -> list[PromptLogprobs]:
    """The prompt logprobs a prefill chunk gives: `final` [rows, hidden] is the head's input at
    positions start..start+rows-1, whose logits score the tokens at start+1..; the last prompt
    position's row scores the answer, not the prompt. `head(rows, threads)` -> float32 logits.
    One PromptLogprobs per CHUNK rows (each a TurnEvent: events stay small)."""
    out = []
    if start == 0:
        out.append(PromptLogprobs(0, [StepLogprobs(prompt[0], 0.0, [])]))
    targets = prompt[start + 1:start + 1 + final.shape[0]]
    for i in range(0, len(targets), CHUNK):
        ids = targets[i:i + CHUNK]
        with torch.inference_mode():
            logprobs = torch.log_softmax(head(final[i:i + len(ids)], threads).float(), dim=-1)
            chosen = logprobs.gather(1, torch.tensor(ids, device=logprobs.device)[:, None])
            chosen = chosen[:, 0].tolist()
            tops = [[] for _ in ids]
            if top > 0:
                values, alternatives = torch.topk(logprobs, min(top, logprobs.shape[-1]))
                tops = [list(zip(a, v)) for a, v in zip(alternatives.tolist(), values.tolist())]
        out.append(PromptLogprobs(start + 1 + i, [StepLogprobs(t, lp, alt) for t, lp, alt
                                                  in zip(ids, chosen, tops)]))
    return out
