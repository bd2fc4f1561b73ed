"""A turn's prompt as token ids: the chat template over its messages, or ids given directly."""
from __future__ import annotations


class TurnError(ValueError):
    """The request cannot be served as asked (bad prompt, too long...): INVALID_ARGUMENT."""


ROLES = ("system", "user", "assistant")


def prompt_ids(turn, tokenizer, vocab_size: int, max_context: int) -> list[int]:
    if turn.prompt_token_ids:
        ids = list(turn.prompt_token_ids)
        if any(t < 0 or t >= vocab_size for t in ids):
            raise TurnError(f"prompt_token_ids must lie in [0, {vocab_size})")
    else:
        if not turn.messages:
            raise TurnError("the turn has no messages and no prompt_token_ids")
        for m in turn.messages:
            if m.role not in ROLES:
                raise TurnError(f"unknown message role {m.role!r}")
        if not any(m.content for m in turn.messages):
            raise TurnError("every message of the turn is empty")
        ids = tokenizer.apply_chat_template([{"role": m.role, "content": m.content}
                                             for m in turn.messages], add_generation_prompt=True)
    if len(ids) >= max_context:
        raise TurnError(f"prompt is {len(ids)} tokens; the model's context is {max_context}")
    return ids
