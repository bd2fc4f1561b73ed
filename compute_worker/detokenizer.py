"""Incremental detokenization: text grows as tokens arrive, never splitting a UTF-8 character."""
from __future__ import annotations


class Detokenizer:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def add(self, token_id: int) -> str:
        """Append a token; returns the new text it completes ('' while a character is partial)."""
        self.ids.append(token_id)
        if self.tokenizer is None:  # token-id-only models (benchmarks, random-weight tests)
            return ""
        full = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if full.endswith("\ufffd"):
            return ""  # a multi-byte character is still incomplete
        new, self.text = full[len(self.text):], full
        return new
