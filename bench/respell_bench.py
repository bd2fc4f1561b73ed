"""Sampled answers and the next turn's reuse (`bidaw bench respell`).

At temperature > 0 a sampled answer's tokens are often not how the tokenizer spells their
text, and the next turn, which sends the text back, tokenizes it afresh: its stored KV then
matches only up to there (compute_worker/respell.py). This runs the same seeded conversations
twice with the real model and a real store, once saving each answer's KV as generated (vLLM's
and SGLang's way) and once respelt, and compares the later turns' reuse. Every answer of the
respelt run is also checked against a recompute of its whole history with the same seed: equal
logits sample equal tokens, so the answers must match token for token.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.runtime.gen import common_pb2

from bench.exactness import TOPICS, first_difference, local_store, user_messages
from compute_worker.engine import Engine
from compute_worker.kv_connector import Recompute
from compute_worker.store_connector import StoreConnector
from compute_worker.turn_runner import TurnRunner

# beside exactness.py's English chats: text whose sampled tokens are often respelt
OPENERS = ("用中文写一首关于{t}的短诗。", "Écris trois phrases sur {t}.",
           "Escribe una lista de datos sobre {t}.", "Write Python code that models {t}.")


@dataclass
class Mode:
    later_prompt_tokens: int = 0  # turns 2.. of each conversation
    later_cached_tokens: int = 0
    later_ttft_s: list[float] = field(default_factory=list)
    respelt_turns: int = 0
    respelt_tokens: int = 0  # recomputed after answers, off the next turn's critical path

    @property
    def cached_share(self) -> float:
        return self.later_cached_tokens / max(1, self.later_prompt_tokens)

    def to_json(self) -> dict:
        return {"later_prompt_tokens": self.later_prompt_tokens,
                "later_cached_tokens": self.later_cached_tokens,
                "cached_share": self.cached_share,
                "later_prefilled_tokens": self.later_prompt_tokens - self.later_cached_tokens,
                "later_ttft_mean_s": sum(self.later_ttft_s) / max(1, len(self.later_ttft_s)),
                "respelt_turns": self.respelt_turns, "respelt_tokens": self.respelt_tokens}


@dataclass
class RespellReport:
    conversations: int
    turns: int
    temperature: float
    max_tokens: int
    as_generated: Mode = field(default_factory=Mode)
    respelt: Mode = field(default_factory=Mode)
    answers: int = 0
    equal_to_recompute: int = 0  # answers of the respelt run equal to a recompute's

    def to_json(self) -> dict:
        return {"conversations": self.conversations, "turns": self.turns,
                "temperature": self.temperature, "max_tokens": self.max_tokens,
                "as_generated": self.as_generated.to_json(), "respelt": self.respelt.to_json(),
                "answers": self.answers, "equal_to_recompute": self.equal_to_recompute}


def chat(seed: int, index: int, turns: int) -> list[str]:
    """Conversation `index`: every other one opens with a question from OPENERS."""
    messages = user_messages(seed, index, turns)
    if index % 2:
        rng = random.Random(f"respell/{seed}/{index}")
        messages[0] = rng.choice(OPENERS).format(t=rng.choice(TOPICS))
    return messages


def _turn(runner: TurnRunner, session: str, history, temperature: float, seed: int,
          max_tokens: int) -> tuple[list[int], str, object]:
    return collect(runner, common_pb2.TurnRequest(
        session_id=session, max_tokens=max_tokens, temperature=temperature, seed=seed,
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in history]))


def collect(runner: TurnRunner, turn) -> tuple[list[int], str, object]:
    """(token ids, text, summary) of one turn run through `runner`."""
    ids, text, summary = [], "", None
    for new_ids, piece, extra in runner.run(turn):
        ids += new_ids
        text += piece
        summary = extra if hasattr(extra, "cached_tokens") else summary
    return ids, text, summary


def run_respell(model, tokenizer, conversations: int, turns: int, temperature: float,
                max_tokens: int, seed: int = 0, progress=None) -> RespellReport:
    report = RespellReport(conversations, turns, temperature, max_tokens)
    fresh = TurnRunner(Engine(model), Recompute(model, common_pb2.KV_FORMAT_KV), tokenizer)
    try:
        for respelt, mode in ((False, report.as_generated), (True, report.respelt)):
            with local_store() as store:
                runner = TurnRunner(Engine(model), StoreConnector(
                    store, model, "respell-bench", common_pb2.KV_FORMAT_KV), tokenizer,
                    respell_answers=respelt)
                try:
                    for index in range(conversations):
                        _conversation(runner, fresh if respelt else None, report, mode, seed,
                                      index)
                        if progress is not None:
                            progress(respelt, index + 1)
                finally:
                    runner.engine.stop()
    finally:
        fresh.engine.stop()
    return report


def _conversation(runner, fresh, report: RespellReport, mode: Mode, seed: int,
                  index: int) -> None:
    history, session = [], f"respell-{seed}-{index}"
    for number, question in enumerate(chat(seed, index, report.turns)):
        history.append(("user", question))
        turn_seed = seed * 1_000_003 + index * 101 + number
        ids, answer, summary = _turn(runner, session, history, report.temperature, turn_seed,
                                     report.max_tokens)
        if number:
            mode.later_prompt_tokens += summary.prompt_tokens
            mode.later_cached_tokens += summary.cached_tokens
            mode.later_ttft_s.append(summary.ttft_s)
        if summary.respelt_tokens:
            mode.respelt_turns += 1
            mode.respelt_tokens += summary.respelt_tokens
        if fresh is not None:
            again, _, _ = _turn(fresh, session, history, report.temperature, turn_seed,
                                report.max_tokens)
            report.answers += 1
            report.equal_to_recompute += first_difference(ids, again) is None
        history.append(("assistant", answer))
