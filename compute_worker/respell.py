"""The answer's KV spelt as the next turn will ask for it.

A client sends the answer back as text, in the next turn's history, and the worker tokenizes
that history afresh. Where the generated tokens are not the tokenizer's own spelling of their
text (a rare split that sampling picked at temperature > 0; a stop string's tokens, which the
text leaves out), the saved KV matches the next prompt only up to there, and the rest of the
answer is prefilled again on the next turn's critical path (vLLM and SGLang lose the same).

So when the answer's tokens differ from its spelling, the worker recomputes the answer from
there, before the KV is saved, as the next turn's history spells it (the chat template's
closing tokens included). The saved KV is then what a recompute of that history computes (a
prefill over the same ids), so an answer from it still equals the recomputed one, and the next
turn reuses the whole history. An answer spelt as the tokenizer spells it is saved as before:
its next turn recomputes only the template's closing tokens, beside its new message.
"""
from __future__ import annotations

import time

from compute_worker.models.kv_blocks import whole_blocks
from compute_worker.prompt import bos_ids, template_kwargs, template_messages
from compute_worker.sequence import DONE, Sequence, drop_rows


def sends_text_back(turn) -> bool:
    """The client sends the answer back as text: a chat (with a generation prompt, so the
    answer is a message of its own) or a raw text prompt; token ids come back as ids."""
    return bool(turn.messages and not turn.no_generation_prompt or turn.raw_prompt)


def history_ids(turn, tokenizer, prompt: list[int], text: str) -> list[int] | None:
    """The ids the next turn's prompt begins with: the chat's messages and the answer as the
    template renders them, or a text prompt followed by the answer. None where that is not an
    extension of `prompt` (a template that rewrites earlier messages), or the client sends no
    text back (token-id prompts, a chat with no generation prompt)."""
    if not sends_text_back(turn):
        return None
    if turn.messages:
        messages = template_messages(turn)
        if turn.continue_final_message:
            messages[-1] = {"role": "assistant", "content": messages[-1]["content"] + text}
        else:
            messages.append({"role": "assistant", "content": text})
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=False,
                                            **template_kwargs(turn))
    else:
        ids = tokenizer.encode(turn.raw_prompt + text)
    ids = bos_ids(turn, tokenizer) + ids
    return ids if ids[:len(prompt)] == prompt else None


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def respell(engine, turn, tokenizer, prompt: list[int], seq: Sequence, text: str,
            max_context: int) -> tuple[list[int], int]:
    """Recompute the end of the finished `seq`'s KV where its tokens differ from the next
    turn's spelling. Returns the ids its cache (and hidden6) now hold the KV of, and how many
    tokens were recomputed (0: the answer is saved as generated)."""
    spoken = prompt + seq.generated
    held = len(seq.cache)  # the last generated token was never fed
    if not sends_text_back(turn):
        return spoken, 0
    answer = seq.generated[:-1] if seq.generated and seq.generated[-1] in seq.eos \
        else seq.generated
    if tokenizer.encode(text) == answer:  # spelt as generated: no need to render the history
        return spoken, 0  # (10 ms for 10k tokens; a tokenizer that spells the answer otherwise
        # in its context than alone only loses this saving)
    ids = history_ids(turn, tokenizer, prompt, text)
    if ids is None or len(ids) >= max_context:
        return spoken, 0
    same = common_prefix(ids, spoken[:held])
    if same == held:  # spelt as generated: at most the template's closing tokens follow
        return spoken, 0
    start = whole_blocks(same, seq.block)  # blocks stay computed whole (kv_blocks.py)
    rows = sum(h.shape[0] for h in seq.hidden6)
    if seq.want_hidden6 and rows < held - start:
        return spoken, 0  # tensor 6 of the tokens to drop is not held here: keep the answer's
    seq.cache.truncate(start)
    if seq.want_hidden6:
        drop_rows(seq.hidden6, held - start)
    tail = Sequence(
        session_id=seq.session_id, prompt=ids, cache=seq.cache, pending=ids[start:],
        sampler=seq.sampler, detok=seq.detok, max_new=0, eos=set(), stops=[],
        arrived=time.monotonic(), want_hidden6=seq.want_hidden6, block=seq.block)
    engine.add(tail)  # a prompt-only sequence: prefilled in the batch, no token sampled
    while tail.out.get() is not DONE:
        pass
    if tail.error is not None:  # what was held before the tail stands
        seq.cache.truncate(start)
        return ids[:start], 0
    seq.hidden6.extend(tail.hidden6)
    return ids, len(ids) - start
