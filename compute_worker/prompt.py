"""A turn's prompt as token ids: the chat template over its messages, a raw text prompt
tokenized as it is, or ids given directly."""
from __future__ import annotations

import json

from services.runtime.turn_bounds import ROLES, TEMPLATE_RESERVED


class TurnError(ValueError):
    """The request cannot be served as asked (bad prompt, too long...): INVALID_ARGUMENT."""

# OpenAI's and vLLM's opening words for a prompt the context cannot hold: clients match them
# (LiteLLM's ContextWindowExceededError, context-trimming retries) and the gateway gives such a
# refusal the code context_length_exceeded (services/gateway/errors.py CONTEXT_EXCEEDED)
CONTEXT_EXCEEDED = "This model's maximum context length is"


def context_exceeded(max_context: int, why: str) -> TurnError:
    return TurnError(f"{CONTEXT_EXCEEDED} {max_context} tokens. However, {why}. "
                     "Please reduce the length of the prompt.")


def too_many_tokens(prompt_tokens: int, max_context: int) -> TurnError:
    """vLLM's numbers: the answer needs at least one token beside the prompt (a larger
    max_tokens is clamped to what is left, so only the prompt can be too long)."""
    return context_exceeded(max_context, f"you requested {prompt_tokens + 1} tokens "
                            f"({prompt_tokens} in the prompt, 1 in the completion)")


def prompt_ids(turn, tokenizer, vocab_size: int, max_context: int) -> list[int]:
    given = [bool(turn.messages), bool(turn.prompt_token_ids), bool(turn.raw_prompt)]
    if sum(given) > 1:
        raise TurnError("give one of messages, prompt_token_ids or raw_prompt")
    if turn.prompt_token_ids:
        ids = list(turn.prompt_token_ids)
        if any(t < 0 or t >= vocab_size for t in ids):
            raise TurnError(f"prompt_token_ids must lie in [0, {vocab_size})")
    elif turn.raw_prompt:
        # As OpenAI and vLLM do: the text itself, with BOS only where the tokenizer wants one.
        ids = bos_ids(turn, tokenizer) + tokenizer.encode(turn.raw_prompt)
    else:
        ids = chat_ids(turn, tokenizer)
    if len(ids) >= max_context:
        raise too_many_tokens(len(ids), max_context)
    return ids


def bos_ids(turn, tokenizer) -> list[int]:
    """vLLM's add_special_tokens: the tokenizer's BOS before the prompt (where it wants one);
    by default before a raw prompt, not before a chat template's text, which writes its own."""
    wanted = (turn.add_special_tokens if turn.HasField("add_special_tokens")
              else not turn.messages)
    add = wanted and tokenizer.add_bos and tokenizer.bos_token_id is not None
    return [tokenizer.bos_token_id] if add else []


def template_messages(turn) -> list[dict[str, str]]:
    """The turn's messages as the chat template takes them (a name only where one was given:
    a template may test for the key)."""
    return [{"role": m.role, "content": m.content, **({"name": m.name} if m.name else {})}
            for m in turn.messages]


def template_kwargs(turn) -> dict:
    """vLLM's chat_template_kwargs: extra variables for the template ({} without)."""
    if not turn.chat_template_kwargs:
        return {}
    try:
        kwargs = json.loads(turn.chat_template_kwargs)
    except ValueError:
        kwargs = None
    if not isinstance(kwargs, dict):
        raise TurnError("chat_template_kwargs must be a JSON object")
    taken = sorted(set(TEMPLATE_RESERVED) & kwargs.keys())
    if taken:
        raise TurnError(f"chat_template_kwargs may not set {taken[0]!r}")
    return kwargs


def chat_ids(turn, tokenizer) -> list[int]:
    """The chat template over the messages. continue_final_message leaves the last (assistant)
    message open, so the answer continues its text; it implies no generation prompt."""
    if not turn.messages:
        raise TurnError("the turn has no messages, prompt_token_ids or raw_prompt")
    for m in turn.messages:
        if m.role not in ROLES:
            raise TurnError(f"unknown message role {m.role!r}")
    if not any(m.content for m in turn.messages):
        raise TurnError("every message of the turn is empty")
    messages = template_messages(turn)
    bos = bos_ids(turn, tokenizer)
    if not turn.continue_final_message:
        return bos + tokenizer.apply_chat_template(
            messages, add_generation_prompt=not turn.no_generation_prompt,
            **template_kwargs(turn))
    final = messages[-1]
    if final["role"] != "assistant" or not final["content"]:
        raise TurnError("continue_final_message needs a last assistant message with content")
    text = tokenizer.render_chat(messages, add_generation_prompt=False, **template_kwargs(turn))
    end = text.rfind(final["content"])
    if end < 0:  # a template that rewrites the content: we cannot tell where it ends
        raise TurnError("this model's chat template cannot continue the final message")
    return bos + tokenizer.encode(text[:end + len(final["content"])])
