"""JSON mode (OpenAI's response_format json_object): the answer is one JSON object.

Each token the sampler chooses is checked against the grammar (json_grammar.py) by feeding its
bytes; one that no JSON object could continue with is refused, and the sampler chooses again
without it (sampling.py). Added tokens (the chat template's markers) never fit; the model's end
of sequence fits only once the object is complete, and is then the only token that does, so the
answer ends there."""
from __future__ import annotations

from compute_worker import json_grammar


class JsonConstraint:
    def __init__(self, speller, eos: list[int] | tuple):
        self.speller = speller  # token id -> its bytes (logprobs.TokenSpeller)
        self.eos = set(eos)
        self.state = json_grammar.START

    def allows(self, token: int) -> bool:
        done = json_grammar.complete(self.state)
        if token in self.eos or done and self.eos:
            return done and token in self.eos
        if self.speller.is_added(token):
            return False
        return json_grammar.feed(self.state, self.speller(token)) is not None

    def accept(self, token: int) -> None:
        if token not in self.eos:
            self.state = json_grammar.feed(self.state, self.speller(token))
