"""Restored KV against recompute, conversation by conversation (`bidaw bench exactness`).

N seeded multi-turn chats with the real model: every turn runs once through a worker that
restores the history's KV from a real store, and once more from scratch (the whole history
recomputed); their greedy answers are compared token for token. The history goes on with the
served (restored) answer, as a user would see it. In float32 every conversation must match, and
in bfloat16 too where block-aligned KV (compute_worker/models/kv_blocks.py) takes the chunking's
rounding away; the report says how many match and, for any others, the turn and token where
they first differ.
"""
from __future__ import annotations

import contextlib
import random
import tempfile
from dataclasses import asdict, dataclass, field
from typing import Iterator

from services.runtime.gen import common_pb2

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.kv_connector import Recompute
from compute_worker.models.quant import weights_label
from compute_worker.store_connector import StoreConnector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start as start_store

TOPICS = ("the moon", "bread", "volcanoes", "chess", "honey bees", "rainbows", "the ocean",
          "trains", "music", "coffee", "winter", "robots", "gardens", "cats", "rivers", "books",
          "bicycles", "clouds", "penguins", "the desert", "maps", "tea", "lighthouses", "apples")
OPENERS = ("Tell me about {t}.", "What is interesting about {t}?", "Write a short poem about {t}.",
           "Explain {t} to a child.", "List three facts about {t}.", "Why do people like {t}?")
FOLLOW_UPS = ("Why?", "Can you say more?", "Give me an example.", "Make it shorter.",
              "What about {t}?", "How does that compare to {t}?", "Summarise that in one sentence.",
              "Is that always true?", "Now say it as a joke about {t}.")


@dataclass(frozen=True)
class Divergence:
    conversation: int
    turn: int  # 1-based
    token: int  # index in that turn's answer of the first token that differs


@dataclass
class ExactnessReport:
    dtype: str
    conversations: int
    turns: int
    max_tokens: int
    weights: str = "dense"  # the format prepare_model put the linears in
    matched: int = 0  # conversations whose every turn matched
    restored_tokens: int = 0  # prompt tokens served from stored KV (reuse did happen)
    divergences: list[Divergence] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def user_messages(seed: int, index: int, turns: int) -> list[str]:
    """The user's side of conversation `index` of run `seed`."""
    rng = random.Random(f"{seed}/{index}")
    messages = [rng.choice(OPENERS).format(t=rng.choice(TOPICS))]
    while len(messages) < turns:
        messages.append(rng.choice(FOLLOW_UPS).format(t=rng.choice(TOPICS)))
    return messages


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two answers differ (None: equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def answer_turn(runner: TurnRunner, session: str, history: list[tuple[str, str]],
                max_tokens: int = 20) -> tuple[list[int], str, object]:
    """One turn of `history` ((role, content) pairs) through `runner`: (token ids, text, the
    turn's summary)."""
    turn = common_pb2.TurnRequest(session_id=session, max_tokens=max_tokens, messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in history])
    ids, text, summary = [], "", None
    for new_ids, new_text, s in runner.run(turn):
        ids += new_ids
        text += new_text
        summary = s or summary
    return ids, text, summary


@contextlib.contextmanager
def local_store(ssd_only: bool = False) -> Iterator[KVClient]:
    """A KV store in this process on a temporary directory (`ssd_only`: no DRAM tier)."""
    with tempfile.TemporaryDirectory(prefix="bidaw-exactness-") as tmp:
        server, core = start_store(StoreConfig(listen="127.0.0.1:0", data_dir=tmp,
                                               dram_bytes=0 if ssd_only else 1 << 30))
        client = KVClient(f"127.0.0.1:{server.port}")
        try:
            yield client
        finally:
            client.close()
            server.stop(0)
            core.close()


def run_exactness(model, tokenizer, store: KVClient, conversations: int, turns: int = 3,
                  seed: int = 0, max_tokens: int = 24, kv_format: int = common_pb2.KV_FORMAT_KV,
                  progress=None) -> ExactnessReport:
    """Compare restored-KV answers with recomputed ones over `conversations` chats."""
    restored = TurnRunner(Engine(model), StoreConnector(
        store, model, weights_label("exactness", model.weights), kv_format), tokenizer)
    fresh = TurnRunner(Engine(model), Recompute(model, kv_format), tokenizer)
    report = ExactnessReport(str(model.dtype).removeprefix("torch."), conversations, turns,
                             max_tokens, model.weights)
    try:
        for index in range(conversations):
            session, history, diverged = f"exactness-{seed}-{index}", [], None
            for number, text in enumerate(user_messages(seed, index, turns), start=1):
                history.append(("user", text))
                served, answer, summary = answer_turn(restored, session, history, max_tokens)
                again, _, _ = answer_turn(fresh, session, history, max_tokens)
                report.restored_tokens += summary.cached_tokens
                token = first_difference(served, again)
                if diverged is None and token is not None:
                    diverged = Divergence(index, number, token)
                history.append(("assistant", answer))
            if diverged is None:
                report.matched += 1
            else:
                report.divergences.append(diverged)
            if progress is not None:
                progress(index + 1, report)
    finally:
        restored.engine.stop()
        fresh.engine.stop()
    return report
