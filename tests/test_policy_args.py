"""`bidaw simulate --policy-arg POLICY.KEY=VALUE`: a value of the wrong type, out of range or
nested 50,000 deep is one line naming the knob before any replay (a TypeError, OverflowError
or RecursionError from inside the replay before); the real CLI on the sample trace."""
from __future__ import annotations

from pathlib import Path

import pytest

from kv_store.eviction.bidaw_prefetch import BidawPrefetchPolicy
from kv_store.eviction.policy_args import checked_args
from services.cli.main import main

SAMPLE = str(Path(__file__).parent / "data" / "bidaw_sample.txt")


def refusal(arg: str) -> str:
    with pytest.raises(SystemExit) as err:
        main(["simulate", "--cache-only", "--trace", SAMPLE, "--policies", "bidaw-size",
              "--dram-gib", "4", "--ssd-gbps", "1.5", "--policy-arg", arg])
    assert isinstance(err.value.code, str) and "\n" not in err.value.code, err.value.code
    return err.value.code


@pytest.mark.parametrize("arg, words", [
    ("bidaw-size.size_exponent=[[1]]", "size_exponent=[[1]] is not a finite number"),
    ("bidaw-size.size_exponent=x", "size_exponent='x' is not a finite number"),
    ("bidaw-size.size_exponent=.nan", "is not a finite number"),
    ("bidaw-size.size_exponent=" + "[" * 50_000 + "]" * 50_000, "not a YAML scalar or list"),
    ("bidaw-size.pace_decay=2", "0 <= pace_decay <= 1"),  # was an OverflowError in the replay
    ("bidaw-size.classes_per_octave=0", "classes_per_octave >= 1"),
    ("bidaw-size.nope=1", "'nope' is not a setting of BidawSizePolicy"),
    ("bidaw-prefetch.end_pace_edges=[a]", "is not a list of a finite number or null"),
    ("bidaw-prefetch.keep_promoted=3", "keep_promoted=3 is not true/false"),
    # a negative horizon was a ValueError traceback from the planner; the others ran silently
    ("bidaw-prefetch.horizon_s=-1", "horizon_s >= 0"),
    ("bidaw-prefetch.loaded_horizon_s=-3", "loaded_horizon_s >= 0 or null"),
    ("bidaw-prefetch.evicted_wait_share=0", "evicted_wait_share > 0 or null"),
])
def test_a_bad_policy_arg_is_one_line_naming_it(arg, words):
    message = refusal(arg)
    assert message.startswith("bidaw simulate: --policy-arg ") and words in message, message


def test_good_values_are_typed_as_declared():
    args = checked_args(BidawPrefetchPolicy, {"end_pace_edges": [-0.1, 0.2], "horizon_s": 15,
                                              "loaded_horizon_s": None, "size_exponent": 1})
    assert args == {"end_pace_edges": (-0.1, 0.2), "horizon_s": 15.0, "loaded_horizon_s": None,
                    "size_exponent": 1.0}  # a base class's knob, passed on by **kwargs
    assert isinstance(args["horizon_s"], float)


@pytest.mark.parametrize("arg", ["bidaw-size.size_exponent=0.3",
                                 "bidaw-size.pace_decay=1.0"])  # the own-pace ablation
def test_the_replay_runs_with_a_good_arg(capsys, arg):
    assert main(["simulate", "--cache-only", "--trace", SAMPLE, "--policies", "bidaw-size",
                 "--dram-gib", "4", "--policy-arg", arg]) == 0
    assert "bidaw-size" in capsys.readouterr().out
