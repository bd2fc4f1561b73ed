"""The `prompt` of a legacy completion: one text, one list of token ids, or a batch of either
(vLLM's and OpenAI's form, which evaluation harnesses such as lm-evaluation-harness send). Each
prompt of a batch is checked as a single one would be, and refused by its index."""
from __future__ import annotations

from services.gateway.errors import bad_request
from services.gateway.fields import check_token_ids

# The most prompts (or choices) one request may carry. Each runs as its own turn, at most 16 at
# once (completion_batch.py): 256 covers the batch sizes evaluation harnesses are run with
# (lm-eval's --batch_size; vLLM sets no bound, and 100 was refused at 64), while one request,
# which holds one admission slot, stays a bounded share of the gateway; the 4 MiB body bounds
# the prompts' text whatever their number.
MAX_PROMPTS = 256


def _token_ids(value) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                           for t in value)


def _one(value, vocab_size: int, param: str) -> str | list[int]:
    """A single prompt: non-empty text, or a non-empty list of ids in the vocabulary."""
    if isinstance(value, str) and value:
        return value
    if _token_ids(value) and value:
        check_token_ids(value, vocab_size, param, "prompt token id")
        return value
    raise bad_request(f"'{param}' must be a non-empty string or array of token ids", param)


def completion_prompts(body: dict, vocab_size: int) -> list[str | list[int]]:
    """The request's prompts, in order (one for a single prompt)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (_token_ids(prompt) and prompt):
        return [_one(prompt, vocab_size, "prompt")]
    if not isinstance(prompt, list) or not prompt:
        raise bad_request("'prompt' must be a non-empty string, array of token ids, or array "
                          "of those (a batch)", "prompt")
    if len(prompt) > MAX_PROMPTS:
        raise bad_request(f"'prompt' holds {len(prompt)} prompts; at most {MAX_PROMPTS} per "
                          "request", "prompt")
    return [_one(entry, vocab_size, f"prompt[{i}]") for i, entry in enumerate(prompt)]
