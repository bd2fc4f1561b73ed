"""The logprobs of an answer in each API's shape, from the worker's per-token records
(TurnEvent.logprobs: StepLogprobs, each token's bytes spelled by the worker, which has the
tokenizer). A token's text is its bytes as UTF-8; a token that holds part of a character shows
the bytes it holds as `\\xNN` (its `bytes` are exact: joined, they are the answer's bytes)."""
from __future__ import annotations

import math

MAX_TOP_LOGPROBS = 20  # OpenAI's chat maximum, and vLLM's default max_logprobs for both APIs
FLOOR = -9999.0  # JSON has no -inf: a token the model cannot produce (vLLM's value)


def token_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="backslashreplace")


def _logprob(value: float) -> float:
    return value if math.isfinite(value) else FLOOR


def _chat_token(record) -> dict:
    return {"token": token_text(record.token), "logprob": _logprob(record.logprob),
            "bytes": list(record.token)}


def chat(steps) -> dict:
    """OpenAI chat: choices[].logprobs, one content entry per token."""
    return {"content": [{**_chat_token(s.chosen), "top_logprobs": [_chat_token(t) for t in s.top]}
                        for s in steps], "refusal": None}


class PromptSteps:
    """A turn's prompt logprobs (TurnEvent.prompt_logprobs), each placed at its prompt position:
    a turn re-run after its worker was lost sends them again, and they land where they were."""

    def __init__(self):
        self.steps: list = []

    def add(self, event) -> None:
        start = event.prompt_logprobs_start
        self.steps[start:start + len(event.prompt_logprobs)] = event.prompt_logprobs

    def text(self) -> str:
        """The prompt decoded: its tokens' bytes as UTF-8 (an echoed token-id prompt)."""
        return b"".join(s.chosen.token for s in self.steps).decode("utf-8", errors="replace")


class CompletionOffsets:
    """Legacy completions' logprobs; text_offset counts characters of the token texts from the
    answer's start, across the chunks of a stream."""

    def __init__(self):
        self.offset = 0

    def shape(self, steps) -> dict:
        out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for s in steps:
            text = token_text(s.chosen.token)
            out["tokens"].append(text)
            out["token_logprobs"].append(_logprob(s.chosen.logprob))
            out["top_logprobs"].append({token_text(t.token): _logprob(t.logprob) for t in s.top})
            out["text_offset"].append(self.offset)
            self.offset += len(text)
        return out

    def shape_prompt(self, steps) -> dict:
        """An echoed prompt's tokens: as the answer's, the first one's logprob and
        alternatives null (nothing comes before it), as OpenAI and vLLM give them."""
        out = self.shape(steps)
        if steps:
            out["token_logprobs"][0] = out["top_logprobs"][0] = None
        return out


def joined(first: dict, then: dict) -> dict:
    """Two legacy-completions logprobs objects, one after the other (echo: prompt, answer)."""
    return {key: first[key] + then[key] for key in first}


def native(steps, with_text: bool) -> dict:
    """SGLang's meta_info fields: [logprob, token id, text or None] per token, and per token the
    list of its top alternatives in that form."""
    def entry(record) -> list:
        return [_logprob(record.logprob), record.token_id,
                token_text(record.token) if with_text else None]

    return {"output_token_logprobs": [entry(s.chosen) for s in steps],
            "output_top_logprobs": [[entry(t) for t in s.top] for s in steps]}


def native_input(steps, start: int, with_text: bool) -> dict:
    """SGLang's input_token_logprobs / input_top_logprobs from prompt position `start` on:
    position 0 (nothing before it) has a null logprob and null alternatives."""
    def entry(record, first: bool) -> list:
        return [None if first else _logprob(record.logprob), record.token_id,
                token_text(record.token) if with_text else None]

    rows = list(enumerate(steps))[start:]
    return {"input_token_logprobs": [entry(s.chosen, p == 0) for p, s in rows],
            "input_top_logprobs": [None if p == 0 else [entry(t, False) for t in s.top]
                                   for p, s in rows]}
