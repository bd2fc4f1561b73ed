"""The Mooncake loader infers conversations as the FAST'25 conversation trace defines them: a turn
extends the earlier turn's full 512-token blocks (its last, partial block is re-cut), and a prefix
that only the shared system prompt matches does not join two requests."""
from __future__ import annotations

import json
import random

from bench.traces import Turn, load_trace
from bench.traces.mooncake import shared_prefix


def _write(tmp_path, rows) -> str:
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def _row(ts_ms, inp, out, ids):
    assert len(ids) == -(-inp // 512)  # the fixture itself is consistent: ceil(input / 512) ids
    return {"timestamp": ts_ms, "input_length": inp, "output_length": out, "hash_ids": ids}


# Block 0 is the system prompt every request starts with. Written conversation by conversation;
# the loader sorts by timestamp.
ROWS = [
    # A: 4 turns; each next input = previous input + answer + new query; the partial block is re-cut
    _row(0, 1300, 200, [0, 1, 2]),                 # full blocks [0, 1]
    _row(40_000, 1800, 100, [0, 1, 10, 11]),       # extends [0, 1]; full [0, 1, 10]
    _row(100_000, 2100, 50, [0, 1, 10, 20, 21]),   # extends [0, 1, 10]; full [0, 1, 10, 20]
    _row(130_000, 2180, 10, [0, 1, 10, 20, 30]),   # same block count, the partial 21 became 30
    # B: 3 turns; b2 has the same full blocks as b1, so b3 matches both: the most recent (b2) wins
    _row(5_000, 1100, 300, [0, 3, 4]),
    _row(65_000, 1500, 400, [0, 3, 12]),
    _row(200_000, 2050, 60, [0, 3, 22, 23, 24]),
    # C: 3 turns, the first two 2 s apart
    _row(10_000, 2600, 20, [0, 5, 6, 7, 8, 9]),
    _row(12_000, 2660, 500, [0, 5, 6, 7, 8, 13]),
    _row(300_000, 3170, 5, [0, 5, 6, 7, 8, 25, 26]),
    # unrelated single requests: u1's only full block is the system prompt, which u2 and u3 share
    _row(20_000, 700, 10, [0, 14]),
    _row(70_000, 1200, 30, [0, 16, 17]),
    _row(150_000, 900, 5, [0, 18]),
]

EXPECTED = [  # user ids in order of first arrival: A=0, B=1, C=2, u1=3, u2=4, u3=5
    Turn(0, 0.0, 1300, 200, 0), Turn(1, 5.0, 1100, 300, 0), Turn(2, 10.0, 2600, 20, 0),
    Turn(2, 12.0, 2660 - 2600 - 20, 500, 1), Turn(3, 20.0, 700, 10, 0),
    Turn(0, 40.0, 1800 - 1300 - 200, 100, 1), Turn(1, 65.0, 1500 - 1100 - 300, 400, 1),
    Turn(4, 70.0, 1200, 30, 0), Turn(0, 100.0, 2100 - 1800 - 100, 50, 2),
    Turn(0, 130.0, 2180 - 2100 - 50, 10, 3), Turn(5, 150.0, 900, 5, 0),
    Turn(1, 200.0, 2050 - 1500 - 400, 60, 2), Turn(2, 300.0, 3170 - 2660 - 500, 5, 2),
]


def test_interleaved_conversations_by_hand(tmp_path):
    turns = load_trace(_write(tmp_path, ROWS))
    assert turns == EXPECTED
    gaps = {}
    for u in range(6):
        times = [t.time for t in turns if t.user == u]
        gaps[u] = [b - a for a, b in zip(times, times[1:])]
    assert gaps == {0: [40.0, 60.0, 30.0], 1: [60.0, 135.0], 2: [2.0, 288.0], 3: [], 4: [], 5: []}


def test_shared_prefix():
    assert shared_prefix([r["hash_ids"] for r in ROWS]) == 1
    assert shared_prefix([[0, 1, 2], [0, 1, 5], [0, 1]]) == 2
    assert shared_prefix([[1, 2], [9]]) == 0
    assert shared_prefix([[], [4, 5]]) == 2 and shared_prefix([]) == 0


def test_a_longer_system_prompt_is_not_a_conversation(tmp_path):
    rows = [  # every request starts with the two blocks [0, 1]
        _row(0, 1600, 100, [0, 1, 2, 3]),      # x1: full [0, 1, 2]
        _row(1000, 1100, 10, [0, 1, 9]),     # u: full [0, 1], the system prompt alone
        _row(9000, 2200, 10, [0, 1, 2, 4, 5]),  # x2 extends x1
        _row(9500, 1700, 10, [0, 1, 7, 8]),    # v matches only u's full blocks: a new user
    ]
    turns = load_trace(_write(tmp_path, rows))
    assert [(t.user, t.round) for t in turns] == [(0, 0), (1, 0), (0, 1), (2, 0)]
    assert turns[2].query_len == 2200 - 1600 - 100


def _synthetic_rows(conversations: int, seed: int) -> tuple[list[dict], list[int]]:
    """Conversations of 1-12 turns, block ids handed out as the trace's hasher does (a new id for
    every new prefix), arrivals interleaved; returns the rows and each row's conversation."""
    rng = random.Random(seed)
    next_id = [1]

    def fresh() -> int:
        next_id[0] += 1
        return next_id[0] - 1

    rows, conv_of = [], []
    for c in range(conversations):
        t = rng.uniform(0, 3_600_000)
        full: list[int] = [0]  # the system prompt: one full block
        context = 512 + rng.randint(600, 3000)  # at least one full block beyond the prompt
        for _ in range(rng.randint(1, 12)):
            while len(full) < context // 512:
                full.append(fresh())
            ids = full + ([fresh()] if context % 512 else [])
            out = rng.randint(1, 800)
            rows.append(_row(int(t), context, out, ids))
            conv_of.append(c)
            context += out + rng.randint(1, 600)
            t += rng.uniform(1000, 300_000)
    order = sorted(range(len(rows)), key=lambda i: rows[i]["timestamp"])
    return [rows[i] for i in order], [conv_of[i] for i in order]


def test_thousands_of_conversations_recovered_exactly(tmp_path):
    rows, conv_of = _synthetic_rows(2000, seed=7)
    path = _write(tmp_path, rows)
    turns = load_trace(path)  # 2000 conversations, ~13,000 requests: well under a second
    assert len(turns) == len(rows)
    # one user per conversation, the same partition of requests
    pairs = {(t.user, c) for t, c in zip(turns, conv_of)}
    assert len(pairs) == len({t.user for t in turns}) == len(set(conv_of)) == 2000
    rounds: dict[int, int] = {}
    for t in turns:
        assert t.round == rounds.get(t.user, 0)
        rounds[t.user] = t.round + 1
    assert max(rounds.values()) == 12


def test_edge_cases_of_full_blocks(tmp_path):
    rows = [
        _row(0, 1536, 100, [0, 1, 2]),          # p: exactly 3 full blocks, no partial one
        _row(1000, 2000, 50, [0, 1, 2, 3]),     # extends all of p's blocks: p's turn 1
        _row(2000, 1100, 10, [0, 40, 41]),      # q: full [0, 40]
        _row(3000, 1300, 10, [0, 40, 42]),      # q's turn 1: same full blocks, partial re-cut
        _row(3500, 1400, 10, [0, 40, 43]),      # a retry / fork of q's turn 1: q's turn 2
        _row(4000, 600, 10, [0, 50]),           # full [0]: the system prompt only
        _row(4500, 700, 10, [0, 50]),           # same ids, but [0] alone links nothing: new user
        {"timestamp": 5000, "input_length": 10, "output_length": 1},   # no hash ids at all
        _row(6000, 2100, 10, [0, 1, 2, 3, 60]), # p's turn 2 (extends p's turn 1's full blocks)
    ]
    turns = load_trace(_write(tmp_path, rows))
    assert [(t.user, t.round) for t in turns] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0), (4, 0), (0, 2)]
    assert turns[1].query_len == 2000 - 1536 - 100
    assert turns[-1].query_len == 2100 - 2000 - 50
    assert turns[7].query_len == 10
