"""`shuffle_answers` / `machine_paced` and `bidaw trace transform --shuffle-answers /
--machine-paced`: what each must keep, what each must change, seeding, bad values."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.traces import Turn, load_trace
from bench.traces.no_signal import machine_paced, machine_paced_users, shuffle_answers
from bench.traces.stats import gaps_after_answers, spearman

SAMPLE = Path(__file__).parent / "data" / "bidaw_sample.txt"


def _trace() -> list[Turn]:
    # user 3: 3 turns, user 7: 2 turns, user 9: 1 turn; gaps 50/50 (user 3), 55 (user 7)
    return [Turn(3, 0.0, 10, 20, 0), Turn(7, 5.0, 30, 40, 0), Turn(9, 7.0, 1, 2, 0),
            Turn(3, 50.0, 11, 21, 1), Turn(7, 60.0, 31, 41, 1), Turn(3, 100.0, 12, 22, 2)]


def test_shuffle_keeps_everything_but_the_pairing():
    orig = load_trace(SAMPLE)
    out = shuffle_answers(orig, seed=0)
    assert len(out) == len(orig)
    assert [(t.user, t.time, t.query_len, t.round) for t in out] == \
        [(t.user, t.time, t.query_len, t.round) for t in orig]
    assert Counter(t.answer_len for t in out) == Counter(t.answer_len for t in orig)
    moved = sum(a.answer_len != b.answer_len for a, b in zip(orig, out))
    assert moved > 0.9 * len(orig)
    # the answer/gap correlation the real trace has is gone
    rho_orig = spearman(*gaps_after_answers(orig))
    rho_out = spearman(*gaps_after_answers(out))
    assert rho_orig > 0.2 and abs(rho_out) < 0.1


def test_shuffle_is_seeded():
    orig = load_trace(SAMPLE)
    assert shuffle_answers(orig, 1) == shuffle_answers(orig, 1)
    assert shuffle_answers(orig, 1) != shuffle_answers(orig, 2)
    assert shuffle_answers([]) == []


def test_machine_paced_users_fraction_and_bounds():
    trace = _trace()
    assert machine_paced_users(trace, 0.0) == set()
    assert machine_paced_users(trace, 1.0) == {3, 7, 9}
    assert len(machine_paced_users(trace, 0.5, seed=5)) == 2  # round(1.5)
    for bad in (-0.1, 1.01):
        with pytest.raises(ValueError, match="machine-paced fraction"):
            machine_paced_users(trace, bad)
    with pytest.raises(ValueError, match="machine-paced gap"):
        machine_paced(trace, 0.5, gap_s=-1.0)


def test_all_machine_paced_by_hand():
    out = machine_paced(_trace(), 1.0)
    assert out == [Turn(3, 0.0, 10, 20, 0), Turn(3, 1.0, 11, 21, 1), Turn(3, 2.0, 12, 22, 2),
                   Turn(7, 5.0, 30, 40, 0), Turn(7, 6.0, 31, 41, 1), Turn(9, 7.0, 1, 2, 0)]
    assert machine_paced(_trace(), 1.0, gap_s=0.0)[:3] == [  # same second, in round order
        Turn(3, 0.0, 10, 20, 0), Turn(3, 0.0, 11, 21, 1), Turn(3, 0.0, 12, 22, 2)]
    assert machine_paced(_trace(), 0.0) == _trace()


def test_machine_paced_on_a_real_trace():
    orig = load_trace(SAMPLE)
    out = machine_paced(orig, 0.5, seed=3)
    paced = machine_paced_users(orig, 0.5, seed=3)
    n_users = len({t.user for t in orig})
    assert len(paced) == round(0.5 * n_users)
    assert sorted(out, key=lambda t: (t.user, t.round)) != out  # interleaved, not grouped
    assert [t.time for t in out] == sorted(t.time for t in out)
    assert Counter(t._replace(time=0.0) for t in out) == Counter(t._replace(time=0.0) for t in orig)
    # the others are untouched, in order; the paced ones keep their first arrival, then 1 s gaps
    assert [t for t in out if t.user not in paced] == [t for t in orig if t.user not in paced]
    for u in list(paced)[:50]:
        mine = [t for t in orig if t.user == u]
        times = [t.time for t in out if t.user == u]
        assert times == [mine[0].time + k for k in range(len(mine))]
        assert [t.round for t in out if t.user == u] == [t.round for t in mine]
    gaps = [t.time - p.time for p, t in zip(out, out[1:])]
    assert min(gaps) >= 0
    assert machine_paced(orig, 0.5, seed=3) != machine_paced(orig, 0.5, seed=4)


def test_trace_transform_cli(tmp_path, capsys):
    from services.cli.main import main

    orig = load_trace(SAMPLE)
    out = tmp_path / "t.txt"
    assert main(["trace", "transform", str(SAMPLE), "--shuffle-answers", "--seed", "2",
                 "--out", str(out), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert load_trace(out) == shuffle_answers(orig, 2) and st["turns"] == len(orig)
    assert abs(st["answer_gap_spearman"]) < 0.1
    assert main(["trace", "transform", str(SAMPLE), "--machine-paced", "0.25", "--seed", "2",
                 "--out", str(out)]) == 0
    assert load_trace(out) == machine_paced(orig, 0.25, 2)
    capsys.readouterr()
    assert main(["trace", "transform", str(SAMPLE), "--out", str(out)]) == 2
    assert "--shuffle-answers" in capsys.readouterr().err
    for bad in ("1.5", "-0.5", "half"):
        with pytest.raises(SystemExit) as exc:
            main(["trace", "transform", str(SAMPLE), "--machine-paced", bad, "--out", str(out)])
        assert exc.value.code == 2
        assert "--machine-paced" in capsys.readouterr().err
