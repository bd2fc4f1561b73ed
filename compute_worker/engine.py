"""The engine: continuous batching over one model.

Callers (one thread per turn) prepare a Sequence — prompt ids, KV restored from the store — and
hand it to the step loop. Each step runs ONE forward over every active sequence: prefill chunks
of new sequences next to single decode tokens of running ones, so a new turn joins the batch at
the next step and a finished one leaves without stalling the others. KV restore and save happen
in the callers' threads, overlapping with the batch — unless `restore_in_step`, the baseline of a
synchronous offload connector (vLLM + LMCache's default): then a restore runs between steps and
every running sequence waits for it.
"""
from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import Iterator

import torch

import services.runtime.tracing as tracing
from services.runtime.gen import common_pb2
from services.runtime.metrics import TIER_LABELS

from compute_worker.detokenizer import Detokenizer
from compute_worker.kv_io import KVSessionIO
from compute_worker.prompt import prompt_ids
from compute_worker.sampling import Sampler
from compute_worker.sequence import DONE, Sequence

log = logging.getLogger("bidaw.compute_worker")
_CANCELLED = object()  # Engine._turns_by_key: the turn was cancelled before it started


class Engine:
    def __init__(self, model, tokenizer, kv_io: KVSessionIO, default_max_tokens: int = 256,
                 max_batch: int = 16, max_prefill_tokens: int = 512, min_step_s: float = 0.0,
                 restore_in_step: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.kv_io = kv_io
        self.default_max_tokens = default_max_tokens
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        # A step's floor: on a GPU a decode step costs about the same with 2 sequences as with
        # 16, so a slot left empty is lost capacity; on a CPU the others speed up instead.
        # Benchmarks that emulate an accelerator set it (0: off).
        self.min_step_s = min_step_s
        self.restore_in_step = restore_in_step
        self._turns = threading.Condition()  # restores waiting or running / a step running
        self._restoring = 0
        self._stepping = False
        self._inbox: queue.Queue[Sequence] = queue.Queue()
        self._active: list[Sequence] = []
        self._turns_by_key: dict[str, Sequence | None] = {}  # cancellable turns (None: not yet)
        self._keys_lock = threading.Lock()
        self.peak_batch = 0  # most sequences ever run in one step (stats, tests)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-steps", daemon=True)
        self._thread.start()

    @property
    def max_context(self) -> int:
        return self.model.config.max_position

    @property
    def running(self) -> int:
        return len(self._active) + self._inbox.qsize()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    # -- one turn (caller's thread) ---------------------------------------------------------

    def cancel(self, key: str) -> bool:
        """Stop the turn run under `key` (its client left): it leaves the batch before the next
        step, between two prefill chunks or two decode tokens, and its KV is not saved. A turn
        still restoring its KV stops once the restore returns. False if no such turn runs."""
        with self._keys_lock:
            if key not in self._turns_by_key:
                return False
            seq = self._turns_by_key[key]
            self._turns_by_key[key] = _CANCELLED
        if seq is not None and seq is not _CANCELLED:
            seq.cancelled = True
            seq.out.put(DONE)  # wake the caller's thread now, not at its next token
        return True

    def run(self, turn, since_arrival_s: float = 0.0, queue_s: float = 0.0,
            kv_stores: list[str] | None = None, key: str = "") -> Iterator:
        """Yields (token_ids, text, None) as tokens come, then ([], '', TurnSummary).
        `kv_stores`: the store shards the scheduler sent (None: the worker's own). `key`: a
        unique name under which cancel() stops this turn."""
        if key:
            with self._keys_lock:
                self._turns_by_key[key] = None
        try:
            yield from self._run(turn, since_arrival_s, queue_s, kv_stores, key)
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

    def _run(self, turn, since_arrival_s: float, queue_s: float, kv_stores, key: str):
        arrived = time.monotonic() - since_arrival_s
        ctx = tracing.current()
        cfg = self.model.config
        prompt = prompt_ids(turn, self.tokenizer, cfg.vocab_size, self.max_context)
        with tracing.span("worker.kv_restore", prompt_tokens=len(prompt)) as span:
            with self._restore_slot():
                restored = self.kv_io.restore(turn.session_id, prompt, kv_stores,
                                              parent=turn.parent_session_id)
            span.set_attributes({
                "bidaw.cached_tokens": restored.tokens, "bidaw.tier": TIER_LABELS[restored.tier],
                "bidaw.kv_bytes": restored.tokens * self.kv_io.bytes_per_token,
                "bidaw.format": "tensor6" if restored.format == common_pb2.KV_FORMAT_TENSOR6
                else "kv", "bidaw.hit": restored.tokens > 0})
        seq = Sequence(
            session_id=turn.session_id, prompt=prompt, cache=restored.cache,
            pending=prompt[restored.tokens:], sampler=Sampler.for_turn(turn, cfg.vocab_size),
            detok=Detokenizer(self.tokenizer),
            max_new=min(turn.max_tokens or self.default_max_tokens,
                        self.max_context - len(prompt)),
            eos=set() if turn.ignore_eos else set(cfg.eos_token_ids),
            stops=[s for s in turn.stop if s], arrived=arrived,
            want_hidden6=self.kv_io.kv_format == common_pb2.KV_FORMAT_TENSOR6)
        if not self._started(key, seq):
            return
        enqueued = time.monotonic()
        self._inbox.put(seq)
        try:
            while (item := seq.out.get()) is not DONE:
                yield item[0], item[1], None
        finally:
            seq.cancelled = True  # a caller that leaves early frees the batch slot
        if not seq.finished:
            return  # cancelled: nothing to save, no summary
        if seq.error is not None:
            raise seq.error
        # Prefill and decode ran batched in the step loop's thread: record them after the fact.
        first, done = seq.arrived + seq.ttft, time.monotonic()
        tracing.record_span("worker.prefill", enqueued, first, parent=ctx,
                            tokens=len(prompt) - restored.tokens)
        tracing.record_span("worker.decode", first, done, parent=ctx,
                            tokens=len(seq.generated), finish_reason=seq.finish_reason)
        with tracing.span("worker.kv_save",
                          tokens=len(prompt) + len(seq.generated) - restored.tokens):
            self.kv_io.save_turn(turn.session_id, prompt + seq.generated, restored, seq.cache,
                                 seq.hidden6, kv_stores)
        yield [], "", common_pb2.TurnSummary(
            prompt_tokens=len(prompt), cached_tokens=restored.tokens,
            completion_tokens=len(seq.generated), kv_tier=restored.tier,
            kv_format=restored.format, ttft_s=seq.ttft, queue_s=queue_s,
            kv_load_s=restored.load_s, convert_s=restored.convert_s,
            finish_reason=seq.finish_reason,
            latency_s=time.monotonic() - arrived)

    @contextlib.contextmanager
    def _restore_slot(self):
        """With restore_in_step, no batch step runs while a restore does (restores go first:
        the step loop waits for every one that is waiting)."""
        if not self.restore_in_step:
            yield
            return
        with self._turns:
            self._restoring += 1
            while self._stepping:
                self._turns.wait()
        try:
            yield
        finally:
            with self._turns:
                self._restoring -= 1
                self._turns.notify_all()

    @contextlib.contextmanager
    def _step_slot(self):
        if not self.restore_in_step:  # the hot path takes no lock
            yield
            return
        with self._turns:
            while self._restoring:
                self._turns.wait()
            self._stepping = True
        try:
            yield
        finally:
            with self._turns:
                self._stepping = False
                self._turns.notify_all()

    # -- the step loop ----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._admit()
            self._active = [s for s in self._active if not s.cancelled]
            if not self._active:
                continue
            try:
                with self._step_slot():
                    self._step()
            except Exception as exc:  # fail this batch's turns, keep serving the next ones
                log.exception("engine step failed")
                for seq in self._active:
                    seq.fail(exc)
                self._active = []

    def _admit(self) -> None:
        block = not self._active
        while len(self._active) < self.max_batch:
            try:
                seq = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            self._active.append(seq)

    def _step(self) -> None:
        budget = self.max_prefill_tokens
        batch, inputs = [], []
        for seq in self._active:
            tokens = seq.next_input(budget)
            if seq.pending:
                if budget <= 0:
                    continue  # this step's prefill budget is spent; decodes still run
                budget -= len(tokens)
            batch.append(seq)
            inputs.append((torch.tensor(tokens), seq.cache))
        self.peak_batch = max(self.peak_batch, len(batch))
        want6 = any(s.want_hidden6 for s in batch)
        started = time.monotonic()
        outs = self.model.forward(inputs, want_hidden6=want6, logits_last_only=True)
        rest = self.min_step_s - (time.monotonic() - started)
        if rest > 0:
            time.sleep(rest)
        for seq, (tokens, _), out in zip(batch, inputs, outs):
            if not seq.fed(len(tokens), out.hidden6 if seq.want_hidden6 else None):
                continue  # more prompt to prefill before the first token
            seq.accept(seq.sampler(out.logits[-1]))
            if seq.finished:
                seq.out.put(DONE)
        self._active = [s for s in self._active if not s.finished]
