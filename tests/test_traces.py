"""Trace loaders, the synthetic generator, statistics and `bidaw trace`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bench.traces import SynthConfig, Turn, load_trace, synthesize
from bench.traces.bidaw_format import write_bidaw
from bench.traces.stats import spearman, trace_stats

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "bidaw_sample.txt"
SHARED_SAMPLE = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "bidaw_sample.txt"


def test_sample_loads_with_the_published_counts():
    turns = load_trace(SAMPLE, "bidaw")
    assert len(turns) == 3261
    assert len({t.user for t in turns}) == 667
    assert turns[0] == Turn(0, 0.0, 14, 20, 10)
    assert all(a.time <= b.time for a, b in zip(turns, turns[1:]))
    assert min(t.round for t in turns) > 0  # an excerpt: round indices do not start at 0


def test_committed_copy_matches_shared_when_present():
    if SHARED_SAMPLE.exists():
        assert SHARED_SAMPLE.read_bytes() == SAMPLE.read_bytes()


def test_auto_format_and_round_trip(tmp_path):
    turns = load_trace(SAMPLE)  # .txt -> the paper's format
    out = tmp_path / "copy.txt"
    write_bidaw(turns, out)
    assert load_trace(out) == turns


def test_mooncake_sessions_from_hash_prefixes(tmp_path):
    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 50, "hash_ids": [1, 2]},
        {"timestamp": 500, "input_length": 512, "output_length": 20, "hash_ids": [9]},
        {"timestamp": 30000, "input_length": 1600, "output_length": 80, "hash_ids": [1, 2, 3, 4]},
        {"timestamp": 45000, "input_length": 700, "output_length": 10, "hash_ids": [9, 10]},
        {"timestamp": 90000, "input_length": 2100, "output_length": 5, "hash_ids": [1, 2, 3, 4, 5]},
        # shares only a first block (a system prompt) with a longer request: a new session
        {"timestamp": 95000, "input_length": 900, "output_length": 5, "hash_ids": [1, 7]},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    turns = load_trace(path)
    sessions = [(t.user, t.round) for t in turns]
    assert sessions == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0)]
    assert turns[2].time == 30.0 and turns[2].query_len == 1600 - 1024 - 50
    assert turns[2].answer_len == 80


def test_sharegpt_conversations_become_timed_turns(tmp_path):
    data = [
        {"id": "a", "conversations": [
            {"from": "human", "value": "x" * 40}, {"from": "gpt", "value": "y" * 400},
            {"from": "human", "value": "z" * 8}, {"from": "gpt", "value": "w" * 80}]},
        {"id": "b", "conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "ok"}]},
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    turns = load_trace(path, seed=1)
    assert turns == load_trace(path, "sharegpt", seed=1)  # seeded
    by_user = {}
    for t in turns:
        by_user.setdefault(t.user, []).append(t)
    a = by_user[0]
    assert [(t.round, t.query_len, t.answer_len) for t in a] == [(0, 10, 100), (1, 2, 20)]
    assert a[1].time - a[0].time > 100 * 0.3  # reading the 100-token answer takes a while


def test_synthetic_is_seeded_and_has_the_papers_statistics():
    cfg = SynthConfig(users=1500, seed=5)
    a, b = synthesize(cfg), synthesize(cfg)
    assert a == b
    assert synthesize(SynthConfig(users=1500, seed=6)) != a
    st = trace_stats(a)
    assert 20 <= st["rounds_per_user"]["mean"] <= 26      # paper: 22.4
    assert 31 <= st["query_len"]["mean"] <= 40            # paper: 36
    assert 40 <= st["answer_len"]["mean"] <= 50           # paper: 45
    assert 40 <= st["gap_s"]["mean"] <= 58                # part 1: 48.5 s
    assert st["answer_gap_spearman"] > 0.6                # part 1: 0.75
    first_arrivals = max(t.time for t in a if t.round == 0)
    assert 12.5 <= 60 * st["users"] / first_arrivals <= 16    # part 1: 14 new users a minute
    assert all(t.time == int(t.time) for t in a)          # whole seconds, as the paper's trace


def test_spearman_on_known_cases():
    x = np.array([1, 2, 3, 4, 5])
    assert abs(spearman(x, x ** 3) - 1.0) < 1e-12
    assert abs(spearman(x, -x) + 1.0) < 1e-12
    assert abs(spearman(np.array([1, 1, 2, 2]), np.array([1, 2, 3, 4])) - 0.8944271909999159) < 1e-9


def test_stats_of_the_sample():
    st = trace_stats(load_trace(SAMPLE))
    assert st["turns"] == 3261 and st["users"] == 667
    assert 0.6 < st["answer_gap_spearman"] < 0.9
    assert abs(st["answer_len"]["mean"] - 44.49) < 0.01


def test_trace_cli_stats_and_synth(tmp_path, capsys):
    from services.cli.main import main

    assert main(["trace", "stats", str(SAMPLE), "--format", "bidaw", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["turns"] == 3261 and "answer_gap_spearman" in st
    out = tmp_path / "syn.txt"
    assert main(["trace", "synth", "--out", str(out), "--users", "50", "--seed", "2", "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["users"] == 50 and len(load_trace(out)) == st["turns"]
