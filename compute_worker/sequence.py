"""One turn being generated: its prompt, cache, sampling and stop rules, and its output queue."""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import torch

from compute_worker.detokenizer import Detokenizer
from compute_worker.sampling import Sampler
from compute_worker.stop_text import StopText

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
    min_new: int = 0  # stop strings are looked for from this many tokens on (min_tokens)
    prompt_top: int | None = None  # prompt logprobs with this many alternatives (None: off)
    generated: list[int] = field(default_factory=list)
    hidden6: list[torch.Tensor] = field(default_factory=list)
    out: queue.Queue = field(default_factory=queue.Queue)
    finish_reason: str = ""
    ttft: float = 0.0
    cancelled: bool = False
    released: threading.Event = field(default_factory=threading.Event)  # the engine let go
    error: BaseException | None = None
    _redone: int = 0  # tokens of hidden6 that the step being fed computes again
    _stop_text: StopText = field(init=False)

    def __post_init__(self) -> None:
        self._stop_text = StopText(self.stops)

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
            drop_rows(self.hidden6, self._redone)
            self.hidden6.append(hidden6)
        self._redone = 0
        if self.pending:
            self.pending = self.pending[n:]
            return not self.pending
        return True

    @property
    def scores_prompt(self) -> bool:
        """Whether the chunk being fed is prompt whose logprobs the turn asked for."""
        return self.prompt_top is not None and bool(self.pending)

    @property
    def fed_so_far(self) -> int:
        """Prompt positions computed before the chunk being fed (restored ones included)."""
        return len(self.prompt) - len(self.pending)

    def end_unanswered(self) -> None:
        """A prompt-only turn (max_new 0: OpenAI's max_tokens 0 with echo) ends with its
        prompt computed; like an answer cut at max_tokens, its finish_reason is "length"."""
        self.ttft = time.monotonic() - self.arrived
        self.finish_reason = "length"

    def accept(self, token: int) -> None:
        """Take the sampled token; emit the text it releases; decide whether the turn is over.
        Each event carries its token (and its logprobs, when the turn asked for them); its text lags while it may begin a stop string
        (stop_text.py), and the stop string itself is never sent, though its tokens are (they
        are generated, counted and saved in the KV, as in vLLM)."""
        self.generated.append(token)
        if len(self.generated) == 1:
            self.ttft = time.monotonic() - self.arrived
        if token in self.eos:
            self.finish_reason = "stop"
            self.out.put(([token], self._stop_text.flush(), self.sampler.last_logprobs))
            return
        text = self.detok.add(token)
        if len(self.generated) < self.min_new:
            text = self._stop_text.flush() + text  # no stop before min_tokens (vLLM's rule)
        else:
            text = self._stop_text.add(text)
        if self._stop_text.stopped:
            self.finish_reason = "stop"
        elif len(self.generated) >= self.max_new:
            self.finish_reason = "length"
            text += self._stop_text.flush()
        self.out.put(([token], text, self.sampler.last_logprobs))

    def fail(self, exc: BaseException) -> None:
        self.error = exc
        self.finish_reason = self.finish_reason or "error"
        self.out.put(DONE)
        self.released.set()  # the engine let go of it (a failed step)


def drop_rows(chunks: list[torch.Tensor], n: int) -> None:
    """Drop the last `n` rows of the concatenation of `chunks`, in place."""
    while n > 0:
        last = chunks.pop()
        if last.shape[0] > n:
            chunks.append(last[:last.shape[0] - n])
        n -= last.shape[0]
