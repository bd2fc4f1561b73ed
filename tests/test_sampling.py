"""The sampler on hand-made logits: penalties, logit_bias, top_k, top_p, greedy and seeds."""
from __future__ import annotations

from collections import Counter

import pytest
import torch

from compute_worker.prompt import TurnError
from compute_worker.sampling import Sampler, biased, nucleus, penalized
from services.runtime.gen import common_pb2


def test_penalties_follow_openai_formula():
    logits = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out = penalized(logits, Counter({1: 3, 3: 1}), presence=0.5, frequency=0.25)
    # token 1: 2 - 3*0.25 - 0.5; token 3: 4 - 1*0.25 - 0.5; others untouched
    assert out.tolist() == [1.0, 0.75, 3.0, 3.25]
    assert logits.tolist() == [1.0, 2.0, 3.0, 4.0]  # the input is not modified
    assert penalized(logits, Counter(), 1.0, 1.0) is logits


def test_negative_penalties_encourage_repetition():
    out = penalized(torch.zeros(3), Counter({2: 2}), presence=-1.0, frequency=-0.5)
    assert out.tolist() == [0.0, 0.0, 2.0]


def test_logit_bias_adds_per_token():
    out = biased(torch.tensor([0.0, 1.0, 2.0]), {0: 5.0, 2: -100.0})
    assert out.tolist() == [5.0, 1.0, -98.0]


def test_nucleus_top_k_keeps_the_k_most_likely():
    order, probs = nucleus(torch.tensor([0.1, 0.4, 0.2, 0.3]), top_k=2, top_p=1.0)
    assert order.tolist() == [1, 3]
    assert probs.tolist() == pytest.approx([4 / 7, 3 / 7])


def test_nucleus_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.1, 0.4, 0.2, 0.3])
    assert nucleus(probs, 0, 0.5)[0].tolist() == [1, 3]  # 0.4 < 0.5, 0.4 + 0.3 reaches it
    assert nucleus(probs, 0, 0.4)[0].tolist() == [1]  # exactly reached by the first
    assert nucleus(probs, 0, 0.95)[0].tolist() == [1, 3, 2, 0]
    assert nucleus(probs, 0, 1e-6)[0].tolist() == [1]  # never empty


def test_top_p_after_top_k_renormalises_first():
    # top_k=2 leaves {1: 4/7, 3: 3/7}; top_p=0.5 then needs only token 1
    order, probs = nucleus(torch.tensor([0.1, 0.4, 0.2, 0.3]), top_k=2, top_p=0.5)
    assert order.tolist() == [1] and probs.tolist() == [1.0]


def test_greedy_applies_logit_bias_and_penalties():
    logits = torch.tensor([0.0, 5.0, 4.0])
    assert Sampler(0.0)(logits) == 1
    assert Sampler(0.0, logit_bias={1: -100.0})(logits) == 2
    # frequency penalty 1.5: once chosen, 1 falls to 3.5 < 4 and 2 is chosen; then 2 falls to
    # 2.5 and 1 is chosen again
    s = Sampler(0.0, frequency_penalty=1.5)
    assert [s(logits), s(logits), s(logits)] == [1, 2, 1]


def test_sampling_only_picks_within_top_k():
    logits = torch.tensor([3.0, 2.9, 2.8, 2.7, 2.6])
    s = Sampler(1.0, seed=7, top_k=2)
    assert {s(logits) for _ in range(200)} == {0, 1}
    s = Sampler(1.0, seed=7)
    assert len({s(logits) for _ in range(200)}) == 5  # without top_k all are reachable


def test_sampling_only_picks_within_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    s = Sampler(1.0, seed=3, top_p=0.7)
    assert {s(logits) for _ in range(200)} == {0, 1}


def test_seed_reproduces_and_different_seeds_differ():
    logits = torch.zeros(1000)

    def draw(seed: int) -> list[int]:
        sampler = Sampler(1.0, seed=seed)
        return [sampler(logits) for _ in range(20)]

    assert draw(11) == draw(11)
    assert draw(11) != draw(12)
    assert Sampler(1.0, seed=(1 << 64) - 1)(logits) in range(1000)  # the full uint64 range


def turn(**fields) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id="s", raw_prompt="x", **fields)


def test_for_turn_maps_the_proto_fields():
    s = Sampler.for_turn(turn(temperature=0.5, seed=9, top_p=0.9, top_k=40,
                              presence_penalty=0.5, frequency_penalty=-0.5,
                              logit_bias={7: 10.0}), vocab_size=100)
    assert (s.temperature, s.top_p, s.top_k, s.presence, s.frequency, s.bias) == (
        0.5, pytest.approx(0.9), 40, 0.5, -0.5, {7: 10.0})
    assert Sampler.for_turn(turn(), 100).top_p == 1.0  # top_p unset (0) is off


@pytest.mark.parametrize("fields, message", [
    ({"logit_bias": {100: 1.0}}, "outside the vocabulary"),
    ({"logit_bias": {-1: 1.0}}, "outside the vocabulary"),
    ({"logit_bias": {5: 101.0}}, "logit_bias values"),
    ({"top_p": 1.5}, "top_p"),
])
def test_for_turn_refuses_bad_knobs(fields, message):
    with pytest.raises(TurnError, match=message):
        Sampler.for_turn(turn(**fields), vocab_size=100)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_every_knob_on_the_engine_s_logits_dtype_and_device(device):
    """The engine hands the sampler bf16 logits on the GPU: the same choices come out."""
    logits = torch.tensor([0.0, 5.0, 4.0, 1.0], dtype=torch.bfloat16, device=device)
    s = Sampler(0.0, logit_bias={1: -100.0}, presence_penalty=0.5, frequency_penalty=1.0)
    assert [s(logits), s(logits)] == [2, 2]  # 4; then 4 - 1.5 = 2.5 is still above 1
    s = Sampler(1.0, seed=1, top_k=2, top_p=0.9, logit_bias={3: 100.0}, frequency_penalty=0.1)
    assert {s(logits) for _ in range(50)} <= {3, 1}
