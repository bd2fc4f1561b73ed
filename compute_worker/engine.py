"""The engine: continuous batching over one model, and nothing else.

Callers hand it Sequences (`add`) — prompt ids and a cache already holding the restored prefix
— and read each one's tokens from `Sequence.out`. Each `step` runs ONE forward over every
active sequence: prefill chunks of new sequences next to single decode tokens of running ones,
so a new turn joins the batch at the next step and a finished one leaves without stalling the
others. The engine's own thread runs the steps, one after the other.
"""
from __future__ import annotations

import logging
import queue
import threading
import time

import torch

from compute_worker.prompt_logprobs import chunk_logprobs
from compute_worker.sequence import DONE, Sequence
from compute_worker.step_gate import StepGate
from compute_worker.step_threads import step_threads

log = logging.getLogger("bidaw.compute_worker")


class Engine:
    def __init__(self, model, max_batch: int = 16, max_prefill_tokens: int = 512,
                 min_step_s: float = 0.0, restore_in_step: bool = False,
                 small_step_threads: int = 1):
        self.model = model
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        # A step's floor: on a GPU a decode step costs about the same with 2 sequences as with
        # 16, so a slot left empty is lost capacity; on a CPU the others speed up instead.
        # Benchmarks that emulate an accelerator set it (0: off).
        self.min_step_s = min_step_s
        # Threads per step (step_threads.py): all the process's for a big step, `small_step_threads`
        # for a small one; on a CPU only (a GPU step's kernels do not run on them), and not for a
        # native forward (q4), whose one call splits only work worth a thread's start.
        self.threads = torch.get_num_threads()
        split_all = model.device.type != "cpu" or getattr(model, "native", None) is not None
        self.small_step_threads = 0 if split_all else small_step_threads
        self.gate = StepGate(exclusive=restore_in_step)  # KV restores take it (step_gate.py)
        self._inbox: queue.Queue[Sequence] = queue.Queue()
        self._active: list[Sequence] = []
        self.peak_batch = 0  # most sequences ever run in one step (stats, tests)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="engine-steps", daemon=True)
        self._thread.start()

    @property
    def running(self) -> int:
        return len(self._active) + self._inbox.qsize()

    def add(self, seq: Sequence) -> None:
        """Queue `seq`: it joins the batch at the next step with a free slot."""
        self._inbox.put(seq)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step(wait=True)

    def step(self, wait: bool = False) -> None:
        """Admit queued sequences, drop cancelled ones, run one forward over the batch. `wait`:
        with nothing to run, wait briefly for a sequence instead of returning at once."""
        self._admit(wait and not self._active)
        for seq in self._active:
            if seq.cancelled:  # out of the batch: its caller may read its cache now
                seq.released.set()
        self._active = [s for s in self._active if not s.cancelled]
        if not self._active:
            return
        try:
            with self.gate.stepping():
                self._forward()
        except Exception as exc:  # fail this batch's turns, keep serving the next ones
            log.exception("engine step failed")
            for seq in self._active:
                seq.fail(exc)
            self._active = []

    def _admit(self, block: bool) -> None:
        while len(self._active) < self.max_batch:
            try:
                seq = self._inbox.get(timeout=0.05) if block else self._inbox.get_nowait()
            except queue.Empty:
                return
            block = False
            self._active.append(seq)

    def _forward(self) -> None:
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
        threads = step_threads(sum(len(t) for t, _ in inputs), self.threads,
                               self.small_step_threads)
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        started = time.monotonic()
        scored = [s.scores_prompt for s in batch]
        outs = self.model.forward(inputs, want_hidden6=want6, logits_last_only=True,
                                  head_threads=self.threads,
                                  all_rows=scored if any(scored) else None)
        rest = self.min_step_s - (time.monotonic() - started)
        if rest > 0:
            time.sleep(rest)
        for seq, (tokens, _), out in zip(batch, inputs, outs):
            if out.final is not None:  # before fed(): the chunk's positions are still pending
                for part in chunk_logprobs(self.model.head_logits, out.final, seq.prompt,
                                           seq.fed_so_far, seq.prompt_top, self.threads):
                    seq.out.put(([], "", part))
            if not seq.fed(len(tokens), out.hidden6 if seq.want_hidden6 else None):
                continue  # more prompt to prefill before the first token
            if seq.max_new == 0:
                seq.end_unanswered()
            else:
                seq.accept(seq.sampler(out.logits[-1]))
            if seq.finished:
                seq.out.put(DONE)
        self._active = [s for s in self._active if not s.finished]
