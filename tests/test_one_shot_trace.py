"""`add_one_shot` / `bidaw trace transform --add-one-shot`: known counts, the fraction, seeding,
and the original turns left exactly as they were."""
from __future__ import annotations

from pathlib import Path

import pytest

from bench.traces import Turn, load_trace
from bench.traces.one_shot import add_one_shot, one_shot_count

SAMPLE = Path(__file__).parent / "data" / "bidaw_sample.txt"


def _trace() -> list[Turn]:
    # two conversations: user 3 (3 turns), user 7 (2 turns); first turns (10, 20) and (30, 40)
    return [Turn(3, 0.0, 10, 20, 0), Turn(7, 5.0, 30, 40, 0), Turn(3, 50.0, 11, 21, 1),
            Turn(7, 60.0, 31, 41, 1), Turn(3, 100.0, 12, 22, 2)]


def test_counts_by_hand():
    assert one_shot_count(5, 0.0) == 0
    assert one_shot_count(5, 0.5) == 5      # 5 of 10
    assert one_shot_count(6, 0.25) == 2     # 2 of 8
    assert one_shot_count(103606, 0.5) == 103606
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="one-shot fraction"):
            one_shot_count(5, bad)


def test_adds_single_turn_sessions_from_first_turns():
    orig = _trace()
    out = add_one_shot(orig, 0.5, seed=1)
    assert len(out) == 10
    added = [t for t in out if t.user > 7]
    assert len(added) == 5
    assert sorted(t.user for t in added) == list(range(8, 13))  # new ids, one per session
    assert all(t.round == 0 for t in added)
    assert {(t.query_len, t.answer_len) for t in added} <= {(10, 20), (30, 40)}
    assert all(0.0 <= t.time <= 100.0 and t.time.is_integer() for t in added)
    # users in order of arrival, the whole trace sorted by time
    assert [t.user for t in added] == sorted(t.user for t in added)
    assert [t.time for t in out] == sorted(t.time for t in out)


def test_original_turns_untouched_and_in_order():
    orig = _trace()
    out = add_one_shot(orig, 0.75, seed=3)
    assert [t for t in out if t.user <= 7] == orig
    assert len(out) == 20 and sum(t.user > 7 for t in out) == 15


def test_seeded_and_fraction_on_a_real_trace():
    orig = load_trace(SAMPLE)
    a = add_one_shot(orig, 0.5, seed=0)
    assert a == add_one_shot(orig, 0.5, seed=0)
    assert a != add_one_shot(orig, 0.5, seed=1)
    base = max(t.user for t in orig)
    one_shot = sum(t.user > base for t in a)
    assert one_shot == len(orig) and len({t.user for t in a if t.user > base}) == one_shot
    assert [t for t in a if t.user <= base] == orig
    lo, hi = min(t.time for t in orig), max(t.time for t in orig)
    assert all(lo <= t.time <= hi for t in a)
    assert add_one_shot(orig, 0.0) == orig


def test_fractional_timestamps_are_kept_fractional():
    orig = [Turn(1, 0.25, 5, 6, 0), Turn(1, 10.75, 5, 6, 1)]
    out = add_one_shot(orig, 0.5, seed=0)
    assert any(not t.time.is_integer() for t in out if t.user > 1)


def test_trace_transform_cli(tmp_path, capsys):
    from services.cli.main import main

    out = tmp_path / "mixed.txt"
    assert main(["trace", "transform", str(SAMPLE), "--format", "bidaw", "--add-one-shot", "0.25",
                 "--seed", "4", "--out", str(out), "--json"]) == 0
    import json

    st = json.loads(capsys.readouterr().out)
    orig = load_trace(SAMPLE)
    mixed = load_trace(out)
    assert st["turns"] == len(mixed) == len(orig) + one_shot_count(len(orig), 0.25)
    assert mixed == add_one_shot(orig, 0.25, seed=4)
    for bad in ("1", "-0.5", "half"):
        with pytest.raises(SystemExit) as exc:
            main(["trace", "transform", str(SAMPLE), "--add-one-shot", bad, "--out", str(out)])
        assert exc.value.code == 2
        assert "--add-one-shot" in capsys.readouterr().err
