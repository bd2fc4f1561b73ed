"""`bidaw bench quality`: a weight format's logits against dense float32's, on the real model."""
from __future__ import annotations

import copy

import pytest

from bench.weights_quality import compare, generated_logits, samples
from compute_worker.models.prepare import prepare_model
from services.cli.main import main


def test_a_format_is_measured_against_dense_and_dense_against_itself_agrees(smollm):
    base, tok = smollm
    reference = samples(base, tok, 2, seed=0, max_tokens=8)
    dense = [generated_logits(base, s) for s in reference]
    itself = compare(base, tok, reference, dense, 8)
    assert itself.top1_agreement == 1.0 and itself.mean_kl < 1e-6 and itself.same_answers == 2

    q4 = copy.deepcopy(base)
    prepare_model(q4, "q4")
    report = compare(q4, tok, reference, dense, 8)
    assert report.positions == sum(len(s.answer) for s in reference) > 0
    assert report.mean_kl > 1e-4  # the quantization moved the logits, and the measure sees it
    assert report.top1_agreement >= 0.8
    assert report.same_answers + len(report.first_differences) == 2


@pytest.mark.parametrize("argv, message", [
    (["--weights", "dense"], "--weights takes formats among"),
    (["--weights", "q4,fp8"], "--weights takes formats among"),
    (["--conversations", "0"], "argument --conversations: must be a positive integer, got 0"),
])
def test_bad_flags_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as refused:
        main(["bench", "quality", *argv])
    # the command's own message, or argparse's usage error (exit 2) on stderr
    said = refused.value.code if isinstance(refused.value.code, str) else capsys.readouterr().err
    assert message in said
