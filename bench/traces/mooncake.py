"""Mooncake's jsonl traces: {"timestamp" (ms), "input_length", "output_length", "hash_ids"}.

Mooncake has no session ids. Its hash ids are chained block hashes (a block's id depends on the
whole prefix), so a request continues an earlier one when the earlier request's hash ids are a
prefix of its own; we take the longest such earlier request. Unmatched requests start a session.
"""
from __future__ import annotations

import json
from pathlib import Path

from bench.traces.turn import Turn


def load_mooncake(path: str | Path) -> list[Turn]:
    records = []
    with open(path, "r", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                records.append(json.loads(line))
    records.sort(key=lambda r: r.get("timestamp", 0))

    ends: dict[int, list[tuple[int, int]]] = {}  # last hash id -> [(prefix length, request index)]
    session_of: list[int] = []
    rounds_in: dict[int, int] = {}
    turns: list[Turn] = []
    prev_context: dict[int, int] = {}  # session -> input + output tokens of its last request
    for i, rec in enumerate(records):
        hashes = list(rec.get("hash_ids") or [])
        parent = _longest_prefix_parent(hashes, ends, records)
        if parent is None:
            session = len(rounds_in)
            rounds_in[session] = 0
        else:
            session = session_of[parent]
        rnd = rounds_in[session]
        rounds_in[session] = rnd + 1
        session_of.append(session)
        if hashes:
            ends.setdefault(hashes[-1], []).append((len(hashes), i))
        inp, out = int(rec.get("input_length", 0)), int(rec.get("output_length", 0))
        # The new query is what the context gained beyond the previous request and its answer.
        query = inp - prev_context.get(session, 0)
        prev_context[session] = inp + out
        turns.append(Turn(session, float(rec.get("timestamp", 0)) / 1000.0, max(query, 0), out, rnd))
    return turns


def _longest_prefix_parent(hashes: list, ends: dict, records: list) -> int | None:
    for j in range(len(hashes) - 1, -1, -1):
        for length, idx in reversed(ends.get(hashes[j], ())):
            # A proper prefix: every block of the earlier request matches ours.
            if length == j + 1 and length < len(hashes) and records[idx]["hash_ids"] == hashes[:length]:
                return idx
    return None
