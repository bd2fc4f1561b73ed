"""OpenAI response bodies and stream chunks built from TurnEvents and the TurnSummary."""
from __future__ import annotations

import importlib.metadata
import time
import uuid

from services.runtime.wire_names import TIER_NAMES

from services.gateway import logprobs as shapes

try:
    VERSION = importlib.metadata.version("bidaw")
except importlib.metadata.PackageNotFoundError:  # run from a source tree, not installed
    VERSION = "unknown"


class Reply:
    """The identity shared by every chunk of one answer, and its final figures; with
    `logprobs`, each choice carries the logprobs of the tokens whose text it carries (the
    worker's StepLogprobs records, shaped by logprobs.py)."""

    def __init__(self, chat: bool, model: str, logprobs: bool = False, echo: bool = False,
                 prompt_text: str = "", index: int = 0):
        self.chat = chat
        self.model = model
        self.logprobs = logprobs
        self.echo = echo  # completions: the prompt's text (and logprobs) before the answer's
        self.prompt_text = prompt_text  # a text prompt's ("": a token-id one's, decoded)
        self.index = index  # the choice's, among several (completion_batch.py)
        self._offsets = shapes.CompletionOffsets()
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.sglext = False  # SGLang's return_cached_tokens_details: where cached tokens were

    def _head(self, chunk: bool) -> dict:
        obj = self.object + (".chunk" if chunk and self.chat else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _logprobs(self, steps) -> dict | None:
        if not self.logprobs:
            return None
        return shapes.chat(steps) if self.chat else self._offsets.shape(steps)

    def _choice(self, text: str, finish: str | None, chunk: bool, steps, prompt=None) -> dict:
        if prompt is not None and self.echo:  # the prompt first, its offsets counted first
            head = self.prompt_text or prompt.text()
            shaped = self._offsets.shape_prompt(prompt.steps) if self.logprobs else None
            logprobs = self._logprobs(steps)
            return {"index": self.index, "text": head + text,
                    "logprobs": shapes.joined(shaped, logprobs) if shaped else logprobs,
                    "finish_reason": finish}
        logprobs = self._logprobs(steps)
        if not self.chat:
            return {"index": self.index, "text": text, "logprobs": logprobs,
                    "finish_reason": finish}
        if chunk:  # "content" even when empty, as vLLM: clients that `+= delta.content`
            # (LMCache's benchmarks) fail on OpenAI's bare {} in the last chunk
            return {"index": self.index, "delta": {"content": text},
                    "logprobs": logprobs, "finish_reason": finish}
        return {"index": self.index, "message": {"role": "assistant", "content": text},
                "logprobs": logprobs, "finish_reason": finish}

    def complete(self, text: str, summary, steps=(), prompt=None) -> dict:
        """The whole non-streamed answer; `steps`: every token's logprobs, when asked;
        `prompt`: the prompt's (logprobs.PromptSteps), shown when echoed."""
        return {**self._head(False), "choices": [self.choice(text, summary, steps, prompt)],
                "usage": usage(summary), "bidaw": extension(summary), **self._sglext(summary)}

    def choice(self, text: str, summary, steps=(), prompt=None) -> dict:
        """One finished choice (a batch's responses gather them)."""
        return self._choice(text, summary.finish_reason or "stop", False, steps, prompt)

    def complete_batch(self, choices: list[dict], summaries: list, prompted: list) -> dict:
        """Several choices' answer (completion_batch.py): usage sums the answers, and the
        prompts of `prompted` (one summary per prompt); `bidaw`: the first's."""
        return {**self._head(False), "choices": choices, "usage": usage(*summaries,
                                                                        prompted=prompted),
                "bidaw": extension(summaries[0]), **self._sglext(summaries[0])}

    def sglext_chunk(self, summary) -> dict:
        """SGLang's chunk of its extension, after the choices' (before any usage chunk)."""
        return {**self._head(True), "choices": [], **self._sglext(summary)}

    def _sglext(self, summary) -> dict:
        return {"sglext": {"cached_tokens_details": cached_details(summary)}} \
            if self.sglext else {}

    def echo_chunk(self, prompt) -> dict:
        """A stream's first chunk when echoing: the prompt's text and logprobs."""
        return {**self._head(True), "choices": [self._choice("", None, True, (), prompt)]}

    def first_chunk(self, live: dict | None = None) -> dict:
        """Chat streams open with the assistant role, as OpenAI's do."""
        delta = {"role": "assistant", "content": ""}
        return self._with({**self._head(True), "choices": [{
            "index": self.index, "delta": delta, "logprobs": None, "finish_reason": None}]},
            live)

    def chunk(self, text: str, finish: str | None = None, steps=(),
              live: dict | None = None) -> dict:
        """`steps`: the logprobs of the tokens since the last chunk (this chunk's text's);
        `live`: the usage so far (vLLM's continuous_usage_stats), or None."""
        return self._with({**self._head(True),
                           "choices": [self._choice(text, finish, True, steps)]}, live)

    @staticmethod
    def _with(chunk: dict, live: dict | None) -> dict:
        if live is not None:
            chunk["usage"] = live
        return chunk

    def usage_chunk(self, summaries: list, prompted: list | None = None) -> dict:
        """stream_options.include_usage: one last chunk with no choices and the usage (of
        several choices: as complete_batch counts it)."""
        return {**self._head(True), "choices": [],
                "usage": usage(*summaries, prompted=prompted), "bidaw": extension(summaries[0])}


def usage(*summaries, prompted=None) -> dict:
    """OpenAI's usage of one turn, or the sum of several; `prompted`: the summaries whose
    prompts count (one per prompt: n answers to one prompt read it once, as in OpenAI)."""
    prompted = summaries if prompted is None else prompted
    return usage_of(sum(s.prompt_tokens for s in prompted),
                    sum(s.completion_tokens for s in summaries),
                    sum(s.cached_tokens for s in prompted))


class LiveUsage:
    """One streamed choice's usage so far (vLLM's continuous_usage_stats): the prompt's
    counts from the worker's first event (a re-run's says them again), the tokens since."""

    def __init__(self, first):
        self.prompt, self.cached, self.completion = first.prompt_tokens, first.cached_tokens, 0

    def add(self, event) -> None:
        if event.prompt_tokens:
            self.prompt, self.cached = event.prompt_tokens, event.cached_tokens
        self.completion += len(event.token_ids)

    def now(self) -> dict:
        return usage_of(self.prompt, self.completion, self.cached)


def usage_of(prompt: int, completion: int, cached: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}}


def cached_details(summary) -> dict:
    """SGLang's cached_tokens_details (its benchmark's --cache-report): where the reused prompt
    tokens were read from. Host memory is the DRAM tier, storage the SSD tier; no KV stays on
    the device between turns."""
    cached = summary.cached_tokens
    if TIER_NAMES.get(summary.kv_tier) == "ssd":
        return {"device": 0, "host": 0, "storage": cached, "storage_backend": "bidaw-ssd"}
    return {"device": 0, "host": cached}


def extension(summary) -> dict:
    """Bidaw's own figures beside OpenAI's fields (clients ignore unknown keys)."""
    return {"kv_tier": TIER_NAMES.get(summary.kv_tier, "none"), "ttft_s": summary.ttft_s,
            "queue_s": summary.queue_s, "kv_load_s": summary.kv_load_s,
            "latency_s": summary.latency_s, "worker_id": summary.worker_id}


def model_card(name: str, config, created: int) -> dict:
    """One /v1/models entry, with vLLM's fields: every served name is a card whose root is the
    first (canonical) name."""
    return {"id": name, "object": "model", "created": created, "owned_by": "bidaw",
            "root": config.served_model_name[0], "parent": None,
            "max_model_len": config.max_model_len or None}
