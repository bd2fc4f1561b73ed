"""Decode throughput of the continuous-batching engine, and what decoding reads per token."""
from __future__ import annotations

import threading
import time

import torch

from bench.compute.random_models import random_ids
from compute_worker.engine import Engine
from compute_worker.kv_codec import KV
from compute_worker.kv_connector import Recompute
from compute_worker.turn_runner import TurnRunner
from services.runtime.gen import common_pb2

PROMPT_TOKENS, ANSWER_TOKENS = 16, 32
MEAN_CONTEXT = PROMPT_TOKENS + ANSWER_TOKENS / 2  # keys a token of those turns attends over


def turn(session: str, ids: list[int], max_tokens: int) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id=session, prompt_token_ids=ids,
                                  max_tokens=max_tokens, ignore_eos=True)


def drain(runner: TurnRunner, request, times: list[float] | None = None):
    """Run one turn to its end; its TurnSummary. `times`: gets the time each token came at."""
    summary = None
    for ids, _, s in runner.run(request):
        if times is not None and ids:
            times += [time.perf_counter()] * len(ids)
        summary = s or summary
    return summary


def decode_throughput(model, sessions: int, tokens: int = ANSWER_TOKENS,
                      small_step_threads: int = 1) -> float:
    """Decoded tokens per second with `sessions` turns of a PROMPT_TOKENS prompt decoding
    together (`small_step_threads`: the engine's, compute_worker/step_threads.py): the tokens
    after each turn's first, over the time from the first turn's first token to the last token,
    so the prompts' prefill is not counted, as llama-bench's generation test counts none."""
    engine = Engine(model, max_batch=max(sessions, 1), small_step_threads=small_step_threads)
    runner = TurnRunner(engine, Recompute(model, KV), None)
    gen = torch.Generator().manual_seed(sessions)
    prompts = [random_ids(model.config.vocab_size, PROMPT_TOKENS, gen) for _ in range(sessions)]
    drain(runner, turn("warm", prompts[0], 2))
    times: list[list[float]] = [[] for _ in prompts]
    threads = [threading.Thread(target=drain, args=(runner, turn(f"d{i}", p, tokens), times[i]))
               for i, p in enumerate(prompts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    engine.stop()
    if any(len(t) != tokens for t in times):
        raise RuntimeError(f"a turn ended early: {[len(t) for t in times]} of {tokens} tokens")
    elapsed = max(t[-1] for t in times) - min(t[0] for t in times)
    return sessions * (tokens - 1) / elapsed


def decode_weight_bytes(model) -> int:
    """Bytes of weights one decode step reads, as stored (quantized ones at their size): every
    layer's and the output projection's, but one row of an embedding table, so the tables count
    only where the output projection is the tied embedding itself (dense and tied)."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    if model.head is not None and model.lm_head is not None:
        tables.add(id(model.lm_head.weight))  # replaced by the quantized head: never read
    read = [t for t in (*model.parameters(), *model.buffers()) if id(t) not in tables]
    if model.head is None and model.lm_head is None:
        read.append(model.embed.weight)
    return sum(t.numel() * t.element_size() for t in read)
