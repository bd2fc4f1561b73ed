"""One turn, start to end: prompt -> restore KV -> stream tokens -> save KV -> summary.

Runs in the caller's thread (one per turn): the KV restore and save overlap with the engine's
batch steps (unless the engine's StepGate makes restores exclusive), and only the batching
itself happens in the engine.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Iterator

import services.runtime.tracing as tracing
from services.runtime.metrics import TIER_LABELS

from compute_worker.detokenizer import Detokenizer
from compute_worker.engine import Engine
from compute_worker.kv_codec import TENSOR6
from compute_worker.kv_connector import KVConnector, Restored, fresh_cache
from compute_worker.logprobs import TokenSpeller
from compute_worker.models.kv_blocks import covering_blocks, whole_blocks
from compute_worker.prompt import prompt_ids
from compute_worker.respell import respell
from compute_worker.sampling import Sampler
from compute_worker.sequence import DONE, Sequence
from compute_worker.turn_summary import PromptCounts, TurnSummary

_CANCELLED = object()  # TurnRunner._turns_by_key: the turn was cancelled before it started


class TurnRunner:
    def __init__(self, engine: Engine, connector: KVConnector, tokenizer,
                 default_max_tokens: int = 0, respell_answers: bool = True):
        self.engine = engine
        self.connector = connector
        self.tokenizer = tokenizer
        self.speller = TokenSpeller(tokenizer)  # token bytes, for JSON mode's grammar
        self.default_max_tokens = default_max_tokens
        self.respell_answers = respell_answers  # off: `bidaw bench respell`'s baseline
        self._turns_by_key: dict[str, object] = {}  # cancellable turns (None: not yet)
        self._keys_lock = threading.Lock()

    @property
    def max_context(self) -> int:
        return self.engine.model.config.max_position

    def cancel(self, key: str) -> bool:
        """Stop the turn run under `key` (its client left): it leaves the batch before the next
        step, between two prefill chunks or two decode tokens, and only its prompt's KV
        computed so far is saved (_keep_stopped). A turn still restoring its KV stops once the
        restore returns. False if no such turn runs."""
        with self._keys_lock:
            if key not in self._turns_by_key:
                return False
            seq = self._turns_by_key[key]
            self._turns_by_key[key] = _CANCELLED
        if isinstance(seq, Sequence):
            seq.cancelled = True
            seq.out.put(DONE)  # wake the caller's thread now, not at its next token
        return True

    def run(self, turn, since_arrival_s: float = 0.0, queue_s: float = 0.0,
            kv_stores: list[str] | None = None, key: str = "",
            kv_max_tokens: int | None = None, kv_suffix_from: int = 0) -> Iterator:
        """Yields ([], '', PromptCounts) once its KV is restored, then (token_ids, text, None)
        as tokens come ((token_ids, text, StepLogprobs) when the turn asks for logprobs; before
        them ([], '', PromptLogprobs) when it asks for prompt logprobs), then
        ([], '', TurnSummary).
        `turn`: a TurnRequest (or anything with its fields). `kv_stores`: the store shards the
        scheduler sent (None: the connector's own). `key`: a unique name under which cancel()
        stops this turn. `kv_max_tokens`: the scheduler's load-or-recompute choice, reuse at
        most this many stored tokens (0: recompute the history; None: all that match).
        `kv_suffix_from` > 0 (its reversed split): recompute the history's first tokens, up to
        that one, while the store reads the KV of the rest."""
        if key:
            with self._keys_lock:
                self._turns_by_key[key] = None
        try:
            yield from self._run(turn, since_arrival_s, queue_s, kv_stores, key, kv_max_tokens,
                                 kv_suffix_from)
        finally:
            if key:
                with self._keys_lock:
                    self._turns_by_key.pop(key, None)

    def _started(self, key: str, seq: Sequence) -> bool:
        """Make `seq` cancellable under `key`; False if it was cancelled already."""
        if not key:
            return True
        with self._keys_lock:
            if self._turns_by_key.get(key) is _CANCELLED:
                return False
            self._turns_by_key[key] = seq
            return True

    def _restore(self, turn, prompt: list[int], kv_stores, limit: int | None) -> Restored:
        with tracing.span("worker.kv_restore", prompt_tokens=len(prompt)) as span:
            if limit == 0:  # RECOMPUTE: the store is not asked
                restored = Restored(fresh_cache(self.engine.model, prompt))
            else:
                restored = self._restore_prefix(turn, prompt, kv_stores, limit)
            span.set_attributes({
                "bidaw.cached_tokens": restored.tokens, "bidaw.tier": TIER_LABELS[restored.tier],
                "bidaw.kv_bytes": restored.tokens * self.connector.bytes_per_token,
                "bidaw.format": "tensor6" if restored.format == TENSOR6 else "kv",
                "bidaw.hit": restored.tokens > 0})
        return restored

    def _restore_prefix(self, turn, prompt: list[int], kv_stores, limit: int | None) -> Restored:
        """The stored KV of the prompt's longest matching prefix, at most `limit` tokens (a
        SPLIT: the connector reuses at most all but the last token of what it is shown, so it
        is shown `limit` + 1; the rest is prefilled on top)."""
        shown = prompt if limit is None or limit >= len(prompt) else prompt[:limit + 1]
        with self.engine.gate.restoring():
            restored = self.connector.restore(turn.session_id, shown, turn.parent_session_id,
                                              kv_stores, turn.cache_salt)
        if shown is not prompt:
            restored.cache.reserve(len(prompt) + 64 - restored.cache.length)
        return self._whole_blocks(restored)

    def _whole_blocks(self, restored: Restored) -> Restored:
        """With aligned KV blocks (kv_blocks.py) only whole blocks are reused: the last, partial
        one was computed by decodes, or in another cut, and is recomputed as a block."""
        keep = whole_blocks(restored.tokens, self.engine.model.kv_block)
        if keep == restored.tokens:
            return restored
        restored.cache.truncate(keep)
        prefix6 = restored.prefix6[:keep * self.connector.bytes_per_token]
        return dataclasses.replace(restored, tokens=keep, prefix6=prefix6)

    def _saved_from(self, restored: Restored, limit: int | None) -> Restored:
        """What the save builds on. After a SPLIT the store holds more than was restored and
        DRAM takes whole sessions only: K/V is written whole from token 0 (the cache holds it
        all), so the session is back in DRAM as after a load; tensor 6, whose restored prefix
        the worker holds as K/V only, is appended from the split point (it stays on SSD)."""
        split = (limit and restored.tokens == limit) or restored.recomputed
        if split and self.connector.kv_format != TENSOR6:
            return dataclasses.replace(restored, tokens=0)
        return restored

    def _restore_reversed(self, turn, prompt: list[int], kv_stores, begin: int,
                          key: str) -> Restored | None:
        """The reversed split: the engine computes the prompt's first `begin` tokens (a
        prefill-only sequence in the batch; causal, so it needs no stored KV) while the store
        reads the KV of the rest of the stored match; then the read K/V goes after them. None
        if the turn was cancelled meanwhile."""
        model = self.engine.model
        cache = fresh_cache(model, prompt)
        first = Sequence(
            session_id=turn.session_id, prompt=prompt[:begin], cache=cache,
            pending=prompt[:begin], sampler=Sampler(),
            detok=Detokenizer(self.tokenizer), max_new=1, eos=set(), stops=[],
            arrived=time.monotonic(), block=model.kv_block)
        if not self._started(key, first):
            return None
        with tracing.span("worker.kv_restore", prompt_tokens=len(prompt),
                          recomputed_tokens=begin) as span:
            self.engine.add(first)
            with self.engine.gate.restoring():
                suffix = self.connector.read_suffix(turn.session_id, prompt, begin, kv_stores,
                                                    turn.cache_salt)
            while first.out.get() is not DONE:
                pass  # the one token sampled after the beginning is not the turn's
            if first.error is not None:
                raise first.error
            if first.cancelled:
                return None
            restored = Restored(cache, begin, recomputed=begin)
            end = whole_blocks(suffix.end, model.kv_block) if suffix else 0
            if end > begin:
                cache.extend(suffix.kv[:, :, :, :end - begin])
                restored = Restored(cache, end, suffix.tier, suffix.format, suffix.load_s,
                                    suffix.convert_s, recomputed=begin)
            span.set_attributes({
                "bidaw.cached_tokens": restored.tokens - begin,
                "bidaw.tier": TIER_LABELS[restored.tier],
                "bidaw.kv_bytes": (restored.tokens - begin) * self.connector.bytes_per_token,
                "bidaw.hit": restored.tokens > begin})
        return restored

    def _keep_stopped(self, turn, prompt: list[int], seq: Sequence, saved_from: Restored,
                      kv_stores) -> None:
        """A turn its client stopped (a chat UI's Stop) keeps the KV of its prompt computed
        so far, in whole blocks: the client's next turn resends that history, with the
        partial answer or without it, and reuses it (vLLM's and SGLang's prefix caches keep
        such blocks). The answer's tokens are not kept: the client may send back another
        text of them. Not for tensor 6 (its rows are kept per fed token, not cut here)."""
        block = self.engine.model.kv_block
        if self.connector.kv_format == TENSOR6 or \
                whole_blocks(min(seq.cache.length, len(prompt)), block) <= saved_from.tokens:
            return  # nothing new was computed (or queued still)
        if not seq.released.wait(timeout=10.0) or seq.error is not None:
            return  # (released: the engine's step that held it has ended)
        keep = whole_blocks(min(seq.cache.length, len(prompt)), block)
        seq.cache.truncate(keep)
        with tracing.span("worker.kv_save", tokens=keep - saved_from.tokens, stopped=True):
            self.connector.save(turn.session_id, prompt[:keep], seq.cache, [], saved_from,
                                kv_stores, turn.cache_salt)

    def _sequence(self, turn, prompt: list[int], restored: Restored, arrived: float) -> Sequence:
        cfg = self.engine.model.config
        return Sequence(
            session_id=turn.session_id, prompt=prompt, cache=restored.cache,
            pending=prompt[restored.tokens:],
            sampler=Sampler.for_turn(turn, cfg.vocab_size, cfg.eos_token_ids, prompt,
                                     self.speller),
            detok=Detokenizer(self.tokenizer),
            max_new=0 if turn.prompt_only else self._answer_room(turn, len(prompt)),
            min_new=turn.min_tokens,
            prompt_top=turn.top_logprobs if turn.prompt_logprobs else None,
            eos=set() if turn.ignore_eos else set(cfg.eos_token_ids),
            stops=[s for s in turn.stop if s], arrived=arrived,
            want_hidden6=self.connector.kv_format == TENSOR6,
            block=self.engine.model.kv_block)

    def _answer_room(self, turn, prompt_tokens: int) -> int:
        """The answer's bound: the turn's max_tokens, else the default (raised to min_tokens),
        else the context's end, as vLLM; never past the context (vLLM clamps too)."""
        room = self.max_context - prompt_tokens
        default = self.default_max_tokens and max(self.default_max_tokens, turn.min_tokens)
        return min(turn.max_tokens or default or room, room)

    def _run(self, turn, since_arrival_s: float, queue_s: float, kv_stores, key: str,
             limit: int | None, suffix_from: int):
        arrived = time.monotonic() - since_arrival_s
        ctx = tracing.current()
        prompt = prompt_ids(turn, self.tokenizer, self.engine.model.config.vocab_size,
                            self.max_context)
        if turn.prompt_logprobs:  # stored KV has no logits: the whole prompt is computed
            limit, suffix_from = 0, 0
        # The beginning recomputed ends on a block edge; rounded up, the read from it never
        # asks for tokens the store has yet to land (a prepared load's end: end_first.py).
        block = self.engine.model.kv_block
        begin = min(covering_blocks(suffix_from, block), whole_blocks(len(prompt) - 1, block))
        if limit != 0 and begin > 0:
            restored = self._restore_reversed(turn, prompt, kv_stores, begin, key)
            if restored is None:
                return  # cancelled while its beginning was computed
            limit = None
        else:
            restored = self._restore(turn, prompt, kv_stores, limit)
        seq = self._sequence(turn, prompt, restored, arrived)
        if not self._started(key, seq):
            return
        enqueued = time.monotonic()
        self.engine.add(seq)
        yield [], "", PromptCounts(len(prompt), restored.tokens - restored.recomputed)
        answer = ""  # the text the client gets, and will send back in the next turn
        try:
            while (item := seq.out.get()) is not DONE:
                answer += item[1]
                yield item  # (ids, text, StepLogprobs or None)
        finally:
            seq.cancelled = True  # a caller that leaves early frees the batch slot
        if not seq.finished:  # stopped by its client: no summary
            self._keep_stopped(turn, prompt, seq, self._saved_from(restored, limit), kv_stores)
            return
        if seq.error is not None:
            raise seq.error
        # Prefill and decode ran batched in the engine's thread: record them after the fact.
        first, done = seq.arrived + seq.ttft, time.monotonic()
        tracing.record_span("worker.prefill", enqueued, first, parent=ctx,
                            tokens=len(prompt) - restored.tokens + restored.recomputed)
        tracing.record_span("worker.decode", first, done, parent=ctx,
                            tokens=len(seq.generated), finish_reason=seq.finish_reason)
        saved, respelt = prompt + seq.generated, 0
        if self.respell_answers:
            with tracing.span("worker.respell") as span:
                saved, respelt = respell(self.engine, turn, self.tokenizer, prompt, seq,
                                         answer, self.max_context)
                span.set_attribute("bidaw.recomputed_tokens", respelt)
        with tracing.span("worker.kv_save", tokens=len(seq.cache) - restored.tokens):
            self.connector.save(turn.session_id, saved, seq.cache, seq.hidden6,
                                self._saved_from(restored, limit), kv_stores, turn.cache_salt)
        yield [], "", TurnSummary(
            prompt_tokens=len(prompt), cached_tokens=restored.tokens - restored.recomputed,
            recomputed_tokens=restored.recomputed, respelt_tokens=respelt,
            completion_tokens=len(seq.generated), kv_tier=restored.tier,
            kv_format=restored.format, ttft_s=seq.ttft, queue_s=queue_s,
            kv_load_s=restored.load_s, convert_s=restored.convert_s,
            finish_reason=seq.finish_reason, latency_s=time.monotonic() - arrived)
