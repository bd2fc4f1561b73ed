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
    block: int = 0  # the model's kv_block: prefill chunks end on block edges, full blocks redone
    generated: list[int] = field(default_factory=list)
    hidden6: list[torch.Tensor] = field(default_factory=list)
    out: queue.Queue = field(default_factory=queue.Queue)
    finish_reason: str = ""
    ttft: float = 0.0
    cancelled: bool = False
    error: BaseException | None = None
    _redone: int = 0  # tokens of hidden6 that the step being fed computes again

    @property
    def finished(self) -> bool:
        return bool(self.finish_reason)

    def next_input(self, budget: int) -> list[int]:
        """Tokens to feed this step: a prefill chunk of at most `budget`, or the last token.
        With blocks (kv_blocks.py) a chunk that leaves prompt behind ends on a block edge, and
        the decode that completes a block feeds the whole block again as one prefill, its
        decoded tokens' KV replaced by the block-aligned one."""
        if self.pending:
            n = max(budget, 1)
            if self.block and n < len(self.pending):
                n = max(n - n % self.block, self.block)
            return self.pending[:n]
        end = self.cache.length + 1  # positions held once the last token is fed
        if self.block and end % self.block == 0:
            start = end - self.block
            self.cache.truncate(start)
            self._redone = self.block - 1
            return (self.prompt + self.generated)[start:end]
        return [self.generated[-1]]

    def fed(self, n: int, hidden6: torch.Tensor | None) -> bool:
        """Record that `n` inputs went through; True when logits are due (prefill is done)."""
        if hidden6 is not None:
            _drop_rows(self.hidden6, self._redone)
            self.hidden6.append(hidden6)
        self._redone = 0
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


def _drop_rows(chunks: list[torch.Tensor], n: int) -> None:
    """Drop the last `n` rows of the concatenation of `chunks`, in place."""
    while n > 0:
        last = chunks.pop()
        if last.shape[0] > n:
            chunks.append(last[:last.shape[0] - n])
        n -= last.shape[0]
