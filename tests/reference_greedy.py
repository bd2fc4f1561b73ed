"""The reference answer of the tests: the model in the test process, greedy, each step's
logits shaped by a rule the test writes out, until an end token or `n` tokens."""
from __future__ import annotations

import torch


@torch.no_grad()
def greedy(smollm, ids: list[int], n: int, shape=lambda logits, seen: logits) -> str:
    """`shape(logits, seen)`: the step's logits (a writable copy) and the tokens so far
    (the prompt's, then the answer's) -> the logits argmax is taken over."""
    model, tok = smollm
    cache, feed, out = model.new_cache(len(ids) + n + 1), ids, []
    for _ in range(n):
        logits = model.forward([(torch.tensor(feed), cache)], logits_last_only=True)[0].logits[-1]
        token = int(torch.argmax(shape(logits.clone(), ids + out)))  # (an inference tensor)
        if token in model.config.eos_token_ids:
            break
        out.append(token)
        feed = [token]
    return tok.decode(out)
