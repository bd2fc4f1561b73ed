"""ShareGPT-style JSON: [{"id", "conversations": [{"from": "human"|"gpt", "value": text}, ...]}].

It has no timestamps and no token counts: lengths are estimated at 4 characters a token, sessions
start as a Poisson process and each next turn follows after the synthetic think-time model (so
the answer-length signal is present, as in the paper's trace). Seeded and reproducible.
"""
from __future__ import annotations

import math
import random
from pathlib import Path

from bench.traces.synthetic import SynthConfig, think_time
from bench.traces.turn import TraceError, Turn, json_value

CHARS_PER_TOKEN = 4.0


def _tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def load_sharegpt(path: str | Path, users_per_min: float | None = None, seed: int = 0) -> list[Turn]:
    data = _conversations(path)
    cfg = SynthConfig(seed=seed)
    rate = (users_per_min or cfg.users_per_min) / 60.0
    rng = random.Random(seed)
    turns: list[Turn] = []
    start = 0.0
    for session, conv in enumerate(data):
        msgs = _messages(path, session, conv)
        start += rng.expovariate(rate)
        now, rnd, query = start, 0, None
        for role, text in msgs:
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


def _conversations(path) -> list:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, f"not UTF-8 text (byte {exc.start + 1})") from None
    data = json_value(path, None, text)
    if not isinstance(data, list):
        raise TraceError(path, None, "not a JSON array of conversations")
    return data


def _messages(path, i: int, conv) -> list[tuple[str, str]]:
    """(role, text) of conversation `i`; TraceError naming it if it is not one."""
    msgs = None
    if isinstance(conv, dict):
        msgs = conv.get("conversations") or conv.get("messages") or []
    if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
        raise TraceError(path, None, f"conversation {i} is not an object with a "
                         "'conversations' (or 'messages') array of objects")
    out = []
    for m in msgs:
        role, text = m.get("from") or m.get("role"), m.get("value") or m.get("content") or ""
        if not isinstance(text, str):
            raise TraceError(path, None, f"conversation {i}: a message's text is not a string")
        out.append((role, text))
    return out
