"""Where a prepared load read end first (end_first.py) cuts a history into parts: a pure rule.

Cuts fall on record edges (a read from one starts at that record, a read of the tokens before
it ends where it begins: no byte read twice), and each part holds at least 1/PARTS of the
history, so a turn arriving mid-load finds at least that much landed once the first part is in,
for at most PARTS reads."""
from __future__ import annotations

PARTS = 4


def cut_points(edges: list[int], tokens: int, parts: int = PARTS) -> list[int]:
    """Where to cut a history of `tokens` tokens, whose records start at `edges` (ascending),
    into at most `parts` parts, each at least 1/parts of it: the cuts, last first."""
    least = tokens / parts
    cuts, top = [], tokens
    for edge in reversed(edges):
        if edge >= least and top - edge >= least:
            cuts.append(edge)
            top = edge
    return cuts
