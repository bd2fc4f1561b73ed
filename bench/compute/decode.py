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


def drain(runner: TurnRunner, request):
    """Run one turn to its end; its TurnSummary."""
    summary = None
    for _, _, s in runner.run(request):
        summary = s or summary
    return summary


def decode_throughput(model, sessions: int, tokens: int = ANSWER_TOKENS) -> float:
    """Generated tokens per second with `sessions` turns of a PROMPT_TOKENS prompt decoding
    together."""
    engine = Engine(model, max_batch=max(sessions, 1))
    runner = TurnRunner(engine, Recompute(model, KV), None)
    gen = torch.Generator().manual_seed(sessions)
    prompts = [random_ids(model.config.vocab_size, PROMPT_TOKENS, gen) for _ in range(sessions)]
    drain(runner, turn("warm", prompts[0], 2))
    threads = [threading.Thread(target=drain, args=(runner, turn(f"d{i}", p, tokens)))
               for i, p in enumerate(prompts)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    engine.stop()
    return sessions * tokens / elapsed


def weight_bytes(model) -> int:
    """Bytes of the model's distinct parameters (tied embeddings once): what a decode step reads,
    since the output projection reads the whole embedding matrix."""
    return sum(p.numel() * p.element_size() for p in model.parameters())
