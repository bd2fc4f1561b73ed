"""A byte bound on a turn's prompt text, checked before anything tokenises it.

A tokenizer maps text to tokens that each stand for at most L bytes of it, where L is the
longest token's byte length in the vocabulary (special tokens included). The chat template
writes every message's content into the text it tokenises (a raw prompt is tokenised as it
is), so a prompt whose texts total B
bytes has at least B / L tokens; with B > max_context * L it cannot fit the context, whatever the
template adds. Refusing exactly those never refuses a prompt that would fit (for templates that
keep each content verbatim, as ChatML-style ones such as SmolLM2's do) and spares the worker the
tokenisation of megabytes it would refuse afterwards. For SmolLM2-135M: 8192 tokens x 81 bytes
(token 46778, a newline and 80 spaces) = 663,552 bytes.
"""
from __future__ import annotations

from compute_worker.prompt import TurnError, context_exceeded, too_many_tokens


def longest_token_bytes(tokenizer) -> int:
    """L: the most UTF-8 bytes one token decodes to. A token holding part of a multi-byte
    character decodes to U+FFFD (3 bytes), which can only over-estimate L: a looser bound."""
    return max(len(tokenizer.decode([i]).encode("utf-8", "surrogatepass"))
               for i in range(tokenizer.vocab_size))


def prompt_byte_bound(tokenizer, max_context: int) -> int:
    return max_context * longest_token_bytes(tokenizer)


def check_turn_size(turn, max_prompt_bytes: int, max_context: int) -> None:
    """Raise TurnError (INVALID_ARGUMENT) for a prompt that cannot fit the context, cheaply:
    token ids by count, text by its UTF-8 length; an answer length no context holds, by name."""
    for name in ("max_tokens", "min_tokens"):
        if getattr(turn, name) > max_context:
            raise TurnError(f"{name} {getattr(turn, name)} is more than the model's context of "
                            f"{max_context} tokens")
    if len(turn.prompt_token_ids) >= max_context:
        raise too_many_tokens(len(turn.prompt_token_ids), max_context)
    total = 0
    for text in (turn.raw_prompt, *(m.content for m in turn.messages)):  # raw: no template
        total += len(text.encode("utf-8", "surrogatepass"))
        if total > max_prompt_bytes:
            raise context_exceeded(max_context, f"the prompt holds more than "
                                   f"{max_prompt_bytes} bytes of text, more than "
                                   f"{max_context} tokens can hold")
