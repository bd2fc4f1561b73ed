"""One turn of a conversation on one model: restore KV, prefill the new tokens, decode, save.

Correctness of reuse: a prompt reuses stored KV only for the longest prefix whose token ids match
what the KV was computed from, of the same model and format; everything after it is recomputed.
At least the last prompt token is always computed, since its logits pick the first answer token.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Iterator

import grpc
import torch

from services.gen import common_pb2

from . import kv_codec
from .detokenizer import Detokenizer
from .kv_client import KVClient
from .sampling import Sampler

log = logging.getLogger("bidaw.compute_worker")


class TurnError(ValueError):
    """The request cannot be served as asked (bad prompt, too long...): INVALID_ARGUMENT."""


@dataclass
class Restored:
    cache: object  # KVCache
    tokens: int = 0  # prompt tokens whose KV was restored
    tier: int = common_pb2.TIER_NONE
    format: int = common_pb2.KV_FORMAT_UNSPECIFIED
    load_s: float = 0.0
    stored_tokens: int = 0  # tokens the store held before this turn


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class TurnRunner:
    def __init__(self, model, tokenizer, store: KVClient | None, model_name: str,
                 kv_format: int, default_max_tokens: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.store = store
        self.model_name = model_name
        self.kv_format = kv_format
        self.bytes_per_token = kv_codec.bytes_per_token(model.config, kv_format, model.dtype)
        self.default_max_tokens = default_max_tokens

    @property
    def max_context(self) -> int:
        return self.model.config.max_position

    def prompt_ids(self, turn) -> list[int]:
        if turn.prompt_token_ids:
            ids = list(turn.prompt_token_ids)
            vocab = self.model.config.vocab_size
            if any(t < 0 or t >= vocab for t in ids):
                raise TurnError(f"prompt_token_ids must lie in [0, {vocab})")
            return ids
        if not turn.messages:
            raise TurnError("the turn has no messages and no prompt_token_ids")
        for m in turn.messages:
            if m.role not in ("system", "user", "assistant"):
                raise TurnError(f"unknown message role {m.role!r}")
        if not any(m.content for m in turn.messages):
            raise TurnError("every message of the turn is empty")
        messages = [{"role": m.role, "content": m.content} for m in turn.messages]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    def run(self, turn, since_arrival_s: float = 0.0, queue_s: float = 0.0) -> Iterator:
        """Yields (token_ids, text, summary-or-None) tuples; the last carries the summary."""
        arrived = time.monotonic() - since_arrival_s
        prompt = self.prompt_ids(turn)
        if len(prompt) >= self.max_context:
            raise TurnError(f"prompt is {len(prompt)} tokens; the model's context is "
                            f"{self.max_context}")
        room = self.max_context - len(prompt)
        max_new = min(turn.max_tokens or self.default_max_tokens, room)
        sampler = Sampler(turn.temperature, turn.seed)
        stops = [s for s in turn.stop if s]
        eos = set(self.model.config.eos_token_ids) if not turn.ignore_eos else set()

        restored = self._restore(turn.session_id, prompt)
        cache = restored.cache
        hidden6: list[torch.Tensor] = []
        want6 = self.kv_format == common_pb2.KV_FORMAT_TENSOR6
        out = self.model.forward([(torch.tensor(prompt[restored.tokens:]), cache)],
                                 want_hidden6=want6, logits_last_only=True)[0]
        if want6:
            hidden6.append(out.hidden6)
        detok = Detokenizer(self.tokenizer)
        generated: list[int] = []
        ttft = 0.0
        finish = "length"
        while True:
            token = sampler(out.logits[-1])
            generated.append(token)
            if len(generated) == 1:
                ttft = time.monotonic() - arrived
            if token in eos:
                finish = "stop"
                yield [token], "", None
                break
            text = detok.add(token)
            hit = next((s for s in stops if s in detok.text), None)
            if hit is not None:
                finish = "stop"
                cut = detok.text.index(hit)
                keep = cut - (len(detok.text) - len(text))
                yield [token], text[:max(keep, 0)], None
                break
            yield [token], text, None
            if len(generated) >= max_new:
                break
            out = self.model.forward([(torch.tensor([token]), cache)], want_hidden6=want6)[0]
            if want6:
                hidden6.append(out.hidden6)
        self._save(turn.session_id, prompt + generated, restored, cache, hidden6)
        summary = common_pb2.TurnSummary(
            prompt_tokens=len(prompt), cached_tokens=restored.tokens,
            completion_tokens=len(generated), kv_tier=restored.tier, kv_format=restored.format,
            ttft_s=ttft, queue_s=queue_s, kv_load_s=restored.load_s, finish_reason=finish,
            latency_s=time.monotonic() - arrived)
        yield [], "", summary

    def _restore(self, session_id: str, prompt: list[int]) -> Restored:
        fresh = Restored(self.model.new_cache(len(prompt) + 64))
        if self.store is None:
            return fresh
        start = time.monotonic()
        try:
            info = self.store.lookup(session_id)
        except grpc.RpcError as exc:
            log.warning("store lookup failed for %r (%s): recomputing", session_id, exc.code())
            return fresh
        fresh.stored_tokens = info.num_tokens
        if (info.tier == common_pb2.TIER_NONE or info.model != self.model_name
                or info.format != self.kv_format or info.bytes_per_token != self.bytes_per_token):
            return fresh
        reuse = min(common_prefix(list(info.token_ids), prompt), len(prompt) - 1)
        if reuse <= 0:
            return fresh
        try:
            stored = self.store.read(session_id, max_tokens=reuse)
        except (grpc.RpcError, IOError) as exc:
            log.warning("KV read of %r failed (%s): recomputing", session_id, exc)
            return fresh
        # The session may have changed between lookup and read: trust only what was read.
        reuse = min(common_prefix(stored.token_ids, prompt[:reuse]), len(stored.token_ids))
        if reuse <= 0 or stored.format != self.kv_format or stored.model != self.model_name:
            return fresh
        kv = kv_codec.kv_from_bytes(self.model, stored.format,
                                    stored.data[:reuse * stored.bytes_per_token])
        cache = self.model.new_cache(len(prompt) + 64)
        cache.extend(kv)
        return Restored(cache, reuse, stored.tier, stored.format, time.monotonic() - start,
                        info.num_tokens)

    def _save(self, session_id: str, tokens: list[int], restored: Restored, cache,
              hidden6: list[torch.Tensor]) -> None:
        """Write the KV of tokens [restored.tokens, cache.length) to the store."""
        if self.store is None:
            return
        start, end = restored.tokens, len(cache)
        if end <= start:
            return
        if self.kv_format == common_pb2.KV_FORMAT_TENSOR6:
            data = kv_codec.to_bytes(torch.cat(hidden6))  # fed tokens: exactly [start, end)
        else:
            data = kv_codec.to_bytes(cache.to_token_major(start, end))
        try:
            self.store.write(session_id, start, tokens[start:end], self.kv_format,
                             self.bytes_per_token, self.model_name, data)
        except grpc.RpcError as exc:  # the answer stands; the next turn recomputes
            log.warning("KV write of %r failed: %s %s", session_id, exc.code(), exc.details())
