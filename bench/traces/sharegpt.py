"""ShareGPT-style JSON: [{"id", "conversations": [{"from": "human"|"gpt", "value": text}, ...]}].

It has no timestamps and no token counts: lengths are estimated at 4 characters a token, sessions
start as a Poisson process and each next turn follows after the synthetic think-time model (so
the answer-length signal is present, as in the paper's trace). Seeded and reproducible.
"""
from __future__ import annotations

import json
import math
import random
from pathlib import Path

from bench.traces.synthetic import SynthConfig, think_time
from bench.traces.turn import Turn

CHARS_PER_TOKEN = 4.0


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def load_sharegpt(path: str | Path, users_per_min: float | None = None, seed: int = 0) -> list[Turn]:
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    cfg = SynthConfig(seed=seed)
    rate = (users_per_min or cfg.users_per_min) / 60.0
    rng = random.Random(seed)
    turns: list[Turn] = []
    start = 0.0
    for session, conv in enumerate(data):
        msgs = conv.get("conversations") or conv.get("messages") or []
        start += rng.expovariate(rate)
        now, rnd, query = start, 0, None
        for msg in msgs:
            role = msg.get("from") or msg.get("role")
            text = msg.get("value") or msg.get("content") or ""
            if role in ("human", "user"):
                query = _tokens(text)
            elif role in ("gpt", "assistant", "chatgpt", "bard") and query is not None:
                answer = _tokens(text)
                turns.append(Turn(session, round(now, 3), query, answer, rnd))
                now += think_time(answer, rng, cfg)
                rnd += 1
                query = None
    turns.sort(key=lambda t: t.time)
    return turns
