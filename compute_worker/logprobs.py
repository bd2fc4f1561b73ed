"""OpenAI's logprobs, worked out only for a turn that asks: at each step the model's own
distribution (log_softmax of the raw logits, before logit_bias, penalties and temperature:
vLLM's "raw logprobs"), in float32; the chosen token's log-probability and the `top` most
likely. And each token's own bytes, which the gateway (it has no tokenizer) shows as text.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's most


@dataclass(frozen=True)
class StepLogprobs:
    token: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, logprob), most likely first


def step_logprobs(logits: torch.Tensor, token: int, top: int) -> StepLogprobs:
    """`token`'s log-probability under `logits` [vocab] and the `top` most likely tokens'."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = float(logprobs[token])
    if top <= 0:
        return StepLogprobs(token, chosen, [])
    values, ids = torch.topk(logprobs, min(top, logprobs.shape[-1]))
    return StepLogprobs(token, chosen, list(zip(ids.tolist(), values.tolist())))


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's spelling of bytes, inverted: a printable byte is its own character;
    each of the others, in byte order, is the next character from U+0100 on."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    alphabet, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            alphabet[chr(byte)] = byte
        else:
            alphabet[chr(0x100 + shifted)] = byte
            shifted += 1
    return alphabet


class TokenSpeller:
    """Token id -> the token's bytes (cached). A vocabulary token's characters are its bytes in
    byte-level BPE's alphabet; an added token (special or not) is spelled as its text."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer  # a ChatTokenizer, or None (token ids only: no bytes)
        self._alphabet = _byte_level_alphabet()
        self._added = ({i: t.content for i, t in
                        tokenizer.tokenizer.get_added_tokens_decoder().items()}
                       if tokenizer is not None else {})
        self._cache: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        spelled = self._cache.get(token)
        if spelled is None:
            spelled = self._cache[token] = self._spell(token)
        return spelled

    def is_added(self, token: int) -> bool:
        """An added token (special or not: the chat template's markers), not the vocabulary's."""
        return token in self._added

    def _spell(self, token: int) -> bytes:
        if self.tokenizer is None:
            return b""
        if token in self._added:
            return self._added[token].encode()
        piece = self.tokenizer.tokenizer.id_to_token(token) or ""
        return b"".join(bytes([self._alphabet[c]]) if c in self._alphabet else c.encode()
                        for c in piece)
