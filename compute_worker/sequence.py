"""One turn being generated: its prompt, cache, sampling and stop rules, and its output queue."""
from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field

import torch

from compute_worker.detokenizer import Detokenizer
from compute_worker.sampling import Sampler

DONE = object()  # end-of-stream marker on Sequence.out


@dataclass(eq=False)
class Sequence:
    session_id: str
    prompt: list[int]
    cache: object  # KVCache, already holding the restored prefix
    pending: list[int]  # prompt tokens still to prefill
    sampler: Sampler
    detok: Detokenizer
    max_new: int
    eos: set[int]
    stops: list[str]
    arrived: float  # monotonic time the turn arrived at the scheduler
    want_hidden6: bool = False
    generated: list[int] = field(default_factory=list)
    hidden6: list[torch.Tensor] = field(default_factory=list)
    out: queue.Queue = field(default_factory=queue.Queue)
    finish_reason: str = ""
    ttft: float = 0.0
    cancelled: bool = False
    error: BaseException | None = None

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    def next_input(self, budget: int) -> list[int]:
        """Tokens to feed this step: a prefill chunk of at most `budget`, or the last token."""
        if self.pending:
            return self.pending[:max(budget, 1)]
        return [self.generated[-1]]

    def fed(self, n: int, hidden6: torch.Tensor | None) -> bool:
        """Record that `n` inputs went through; True when logits are due (prefill is done)."""
        if hidden6 is not None:
            self.hidden6.append(hidden6)
        if self.pending:
            self.pending = self.pending[n:]
            return not self.pending
        return True

    def accept(self, token: int) -> None:
        """Take the sampled token; emit its text; decide whether the turn is over."""
        self.generated.append(token)
        if len(self.generated) == 1:
            self.ttft = time.monotonic() - self.arrived
        if token in self.eos:
            self.finish_reason = "stop"
            self.out.put(([token], ""))
            return
        text = self.detok.add(token)
        hit = next((s for s in self.stops if s in self.detok.text), None)
        if hit is not None:
            self.finish_reason = "stop"
            seen_before = len(self.detok.text) - len(text)
            text = text[:max(self.detok.text.index(hit) - seen_before, 0)]
        elif len(self.generated) >= self.max_new:
            self.finish_reason = "length"
        self.out.put(([token], text))

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self.finish_reason = self.finish_reason or "error"
        self.out.put(DONE)
