"""A prompt that cannot fit the model's context is refused here, before the scheduler or a
worker holds or tokenises it: its text is longer than the context's tokens times the longest
token's bytes (compute_worker/prompt_bound.py explains why no prompt that fits is refused)."""
from __future__ import annotations

from services.gateway.errors import CONTEXT_CODE, CONTEXT_EXCEEDED, ApiError
from services.gateway.protocol import Parsed


def check_prompt_size(parsed: Parsed, chat: bool, max_prompt_bytes: int,
                      max_model_len: int = 0, param: str = "") -> None:
    """`param`: the field named (a batch's prompt[i]; default messages or prompt)."""
    if not max_prompt_bytes:
        return
    total = 0
    # a raw completion prompt (Parsed.raw_prompt, where the protocol has one) counts the same
    texts = [getattr(parsed, "raw_prompt", ""), *(content for _, content in parsed.messages)]
    for content in texts:
        total += len(content.encode())  # surrogates were refused with the body
        if total > max_prompt_bytes:
            field = param or ("messages" if chat else "prompt")
            # OpenAI's words and code for it, which clients match (errors.CONTEXT_EXCEEDED)
            head = (f"{max_model_len} tokens. However," if max_model_len
                    else "too small for this prompt:")
            raise ApiError(400, f"{CONTEXT_EXCEEDED} {head} '{field}' holds more than "
                           f"{max_prompt_bytes} bytes of text, more than the model's context "
                           f"can hold. Please reduce the length of the {field}.", field,
                           CONTEXT_CODE)
