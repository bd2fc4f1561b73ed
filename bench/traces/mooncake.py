"""Mooncake's jsonl traces: {"timestamp" (ms), "input_length", "output_length", "hash_ids"}.

Mooncake has no session ids; conversations are inferred from the hash ids of 512-token blocks
(an id names a block *and* everything before it). A later turn's input is the earlier turn's
input + answer + the new query, so its ids extend the earlier request's *full* blocks
(input_length // 512 of them), while the earlier request's last, partial block is re-cut and
gets a new id. So a request continues the conversation of the earlier request whose full blocks
are the longest proper prefix of its ids (the most recent such request on ties), and starts a new
conversation when there is none. A prefix made only of the leading blocks every request shares
(the system prompt, block 0 in the FAST'25 conversation trace) does not count: it would join
every conversation into one.

Cost: one dict from a request's full-block chain to the latest request with that chain, keyed by
a rolling hash of the prefix (O(1) a block), so loading is O(total blocks).
"""
from __future__ import annotations

import math
from pathlib import Path

from bench.traces.turn import TraceError, Turn, checked_turn, json_value, text_lines

BLOCK_TOKENS = 512


def _read(path: str | Path) -> list[dict]:
    records = []
    for n, line in text_lines(path):
        line = line.strip()
        if line:
            records.append(_record(path, n, line))
    records.sort(key=lambda r: r["timestamp"])  # stable: file order on equal times
    return records


def _record(path, n: int, line: str) -> dict:
    """One request, its fields checked: a line that is not one is refused where it is."""
    rec = json_value(path, n, line)
    if not isinstance(rec, dict):
        raise TraceError(path, n, "not a JSON object")
    try:
        ts = _number(rec, "timestamp", float)
        inp, out = _number(rec, "input_length", int), _number(rec, "output_length", int)
        checked_turn(0, ts, inp, out, 0)
        blocks = rec.get("hash_ids") or []
        if not isinstance(blocks, list) or not all(_hashable(b) for b in blocks):
            raise ValueError("'hash_ids' must be an array of block ids")
    except ValueError as exc:
        raise TraceError(path, n, str(exc)) from None
    return {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": blocks}


def _number(rec: dict, name: str, kind: type):
    value = rec.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"'{name}' must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"'{name}' is not a finite number")
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"'{name}' must be a whole number, not {value}")
    try:
        return kind(value)
    except OverflowError:  # an integer past any float: checked_turn names it as out of range
        raise ValueError(f"'{name}' {value} is out of range") from None


def _hashable(block) -> bool:
    return isinstance(block, (int, str)) and not isinstance(block, bool)


def shared_prefix(blocks: list[list]) -> int:
    """How many leading blocks every request (with blocks) has in common."""
    lists = [b for b in blocks if b]
    if not lists:
        return 0
    n = min(len(b) for b in lists)
    first = lists[0]
    for b in lists[1:]:
        while n and b[:n] != first[:n]:
            n -= 1
    return n


def _prefix_keys(blocks: list) -> list[int]:
    """keys[k] identifies blocks[:k + 1] (a hash chained over the prefix)."""
    keys, key = [], 0
    for b in blocks:
        key = hash((key, b))
        keys.append(key)
    return keys


def load_mooncake(path: str | Path) -> list[Turn]:
    records = _read(path)
    blocks = [list(r["hash_ids"]) for r in records]
    shared = shared_prefix(blocks)
    latest: dict[int, int] = {}  # key of a full-block chain -> latest request index with it
    session_of: list[int] = []
    rounds: list[int] = []  # turns so far, per session
    turns: list[Turn] = []
    for i, rec in enumerate(records):
        mine, keys = blocks[i], _prefix_keys(blocks[i])
        parent = None
        for k in range(len(mine) - 1, shared, -1):  # a proper prefix, beyond the shared one
            j = latest.get(keys[k - 1])
            if j is not None and blocks[j][:k] == mine[:k]:  # guard against a hash collision
                parent = j
                break
        inp, out = rec["input_length"], rec["output_length"]
        if parent is None:
            session, query = len(rounds), inp
            rounds.append(0)
        else:
            session = session_of[parent]
            prev = records[parent]
            # The new query is what the context gained beyond the earlier request and its answer.
            query = max(inp - prev["input_length"] - prev["output_length"], 0)
        session_of.append(session)
        turns.append(Turn(session, rec["timestamp"] / 1000.0, query, out, rounds[session]))
        rounds[session] += 1
        full = min(inp // BLOCK_TOKENS, len(mine))
        if full:
            latest[keys[full - 1]] = i
    return turns
