"""Stop strings over streamed text (compute_worker/stop_text.py), on hand-made pieces: no part
of a completed stop string is ever released, text that may begin one waits, and what never
completes one is released in the end."""
from __future__ import annotations

import pytest

from compute_worker.stop_text import StopText, held_back


def _stream(stops: list[str], pieces: list[str]) -> tuple[list[str], bool]:
    """The released pieces (the rest flushed at the end unless a stop string completed)."""
    text = StopText(stops)
    out = [text.add(p) for p in pieces]
    if not text.stopped:
        out.append(text.flush())
    return out, text.stopped


@pytest.mark.parametrize("stops, pieces, want, stopped", [
    # the colour list of the defect: "2. Blue" spans three tokens
    (["2. Blue"], ["1", ".", " Red", "\n", "2", ".", " Blue", "\n"], "1. Red\n", True),
    (["Blue"], ["1", ".", " Red", "\n", "2", ".", " Blue"], "1. Red\n2. ", True),
    ([", 6"], [" ", "5", ",", " ", "6", ","], " 5", True),
    (["ab", "abc"], ["x", "a", "b", "c"], "x", True),  # the shorter one completes first
    (["abc", "bc"], ["x", "a", "b", "c"], "x", True),  # both complete: the earliest start
    (["abcd", "bc"], ["a", "b", "c", "d"], "a", True),  # a longer candidate is abandoned
    (["abc"], ["ab", "ab", "c"], "ab", True),  # a partial match restarts inside itself
    (["aab"], ["a", "a", "a", "b"], "a", True),
    (["ab"], ["xa", "by"], "x", True),  # everything after the stop string is dropped
    (["é!"], ["caf", "é", "!"], "caf", True),  # unicode, counted in characters
    (["🙂🙂"], ["a🙂", "b🙂", "🙂c"], "a🙂b", True),
    (["END"], ["the E", "N", "d"], "the ENd", False),  # a partial match that never completes
    (["END"], ["the E", "N"], "the EN", False),  # held to the very end, then released
    ([], ["a", "b"], "ab", False),
])
def test_the_released_text_ends_before_the_first_completed_stop(stops, pieces, want, stopped):
    out, hit = _stream(stops, pieces)
    assert "".join(out) == want and hit == stopped


def test_text_that_may_begin_a_stop_string_waits_and_no_piece_holds_part_of_it():
    out, _ = _stream(["2. Blue"], ["1", ".", " Red", "\n", "2", ".", " Blue"])
    assert out == ["1", ".", " Red", "\n", "", "", ""]  # "2", "." wait, then are dropped
    out, _ = _stream(["2. Blue"], ["1", "2", ".", " Red"])
    assert out == ["1", "", "", "2. Red", ""]  # "2." released once " R" rules it out


def test_after_a_stop_nothing_more_is_released():
    text = StopText(["x"])
    assert text.add("axb") == "a" and text.stopped
    assert text.add("c") == "" and text.flush() == ""


def test_held_back_is_the_longest_suffix_that_begins_a_stop_string():
    assert held_back("1. Red\n2.", ["2. Blue"]) == 2
    assert held_back("xab", ["abc", "b"]) == 2  # "ab" begins "abc"; "b" alone would be a hit
    assert held_back("xaa", ["aab"]) == 2
    assert held_back("xyz", ["abc"]) == 0
    assert held_back("", ["abc"]) == 0 and held_back("abc", []) == 0
