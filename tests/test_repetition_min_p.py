"""vLLM's repetition_penalty and min_p: the rules on hand-made logits, the ranges at the scheduler
and the worker, then greedy and seeded answers of the real model through the live deployment's
OpenAI and native APIs, against a plain reference loop over SmolLM2 in this process."""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.request

import openai
import pytest
import torch

from compute_worker.prompt import TurnError
from compute_worker.sampling import Sampler, min_p_kept, repetition_penalized
from scheduler.validation import turn_problem
from services.runtime.gen import common_pb2
from tests.reference_greedy import greedy

MODEL = "smollm2-135m"
YES = "Repeat the word 'yes' forever: yes yes yes"  # greedy: " yes" again and again


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = torch.tensor([2.0, -2.0, 0.0, 3.0, -1.0])
    seen = torch.tensor([True, True, True, False, False])
    assert repetition_penalized(logits, seen, 2.0).tolist() == [1.0, -4.0, 0.0, 3.0, -1.0]
    assert repetition_penalized(logits, seen, 0.5).tolist() == [4.0, -1.0, 0.0, 3.0, -1.0]
    assert repetition_penalized(logits, seen, 1.0) is logits
    assert logits.tolist() == [2.0, -2.0, 0.0, 3.0, -1.0]  # the input is not modified


def test_min_p_drops_tokens_below_the_fraction_of_the_top_probability():
    probs = torch.tensor([0.0625, 0.5, 0.3125, 0.125])  # (exact in binary)
    assert min_p_kept(probs, 0.5).tolist() == [0.0, 0.5, 0.3125, 0.0]  # below 0.25: dropped
    assert min_p_kept(probs, 0.25).tolist() == [0.0, 0.5, 0.3125, 0.125]  # 0.125 is not below
    assert min_p_kept(probs, 1.0).tolist() == [0.0, 0.5, 0.0, 0.0]
    assert min_p_kept(probs, 0.0) is probs


def test_greedy_repetition_penalty_covers_the_prompt_and_the_answer():
    logits = torch.tensor([3.0, 2.0, 1.0, -1.0])

    def answer() -> list[int]:
        s = Sampler(0.0, repetition_penalty=2.0, prompt=[0, 0])
        return [s(logits) for _ in range(4)]

    # 0 (a prompt token) is 1.5 < 2: 1; then 1 is 1.0 < 1.5: 0; both seen, 0 stays first
    assert answer() == [1, 0, 0, 0] == answer()  # deterministic
    assert [Sampler(0.0, prompt=[0])(logits) for _ in range(2)] == [0, 0]  # 1: off


def test_min_p_applies_after_temperature():
    logits = torch.tensor([0.0, -1.0])  # the second is e^-1 = 0.37 of the first at T=1
    cold = Sampler(0.5, seed=1, min_p=0.3)  # at T=0.5, e^-2 = 0.14 < 0.3: dropped
    assert {cold(logits) for _ in range(200)} == {0}
    warm = Sampler(1.0, seed=1, min_p=0.3)
    assert {warm(logits) for _ in range(200)} == {0, 1}


def test_min_p_with_top_k_and_top_p_and_a_seed_reproduces():
    logits = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.06, 0.04]))

    def draw(seed: int, min_p: float) -> list[int]:
        s = Sampler(1.0, seed=seed, min_p=min_p, top_k=4, top_p=0.99)
        return [s(logits) for _ in range(300)]

    assert set(draw(5, 0.2)) == {0, 1, 2} and draw(5, 0.2) == draw(5, 0.2)  # 0.06 < 0.08
    assert set(draw(5, 0.0)) == {0, 1, 2, 3}  # top_k 4 keeps the fourth without min_p


def turn(**fields) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id="s", raw_prompt="x", **fields)


def test_for_turn_maps_the_fields_and_unset_is_off():
    s = Sampler.for_turn(turn(repetition_penalty=1.5, min_p=0.25), 100, prompt=[3, 4])
    assert (s.repetition, s.min_p, s._prompt) == (1.5, 0.25, [3, 4])
    s = Sampler.for_turn(turn(), 100, prompt=[3])
    assert (s.repetition, s.min_p) == (1.0, 0.0)  # 0 on the wire: off


@pytest.mark.parametrize("fields, name", [
    ({"repetition_penalty": 2.5}, "repetition_penalty"),
    ({"repetition_penalty": -1.0}, "repetition_penalty"),
    ({"repetition_penalty": math.nan}, "repetition_penalty"),
    ({"min_p": 1.5}, "min_p"),
    ({"min_p": -0.5}, "min_p"),
    ({"min_p": math.inf}, "min_p"),
])
def test_the_scheduler_and_the_worker_refuse_bad_values_by_name(fields, name):
    assert turn_problem(turn(**fields), 0).startswith(name)
    with pytest.raises(TurnError, match=name):
        Sampler.for_turn(turn(**fields), 100)
    assert turn_problem(turn(repetition_penalty=2.0, min_p=1.0), 0) is None


def test_a_tiny_penalty_or_temperature_overflowing_float32_still_samples():
    # 3 / 1e-44 is +inf in float32: softmax made NaN of it and multinomial raised (INTERNAL)
    logits = torch.tensor([3.0, 2.0, -1.0])
    s = Sampler(1.0, seed=1, repetition_penalty=1e-44, prompt=[0, 1])
    assert {s(logits) for _ in range(50)} <= {0, 1}  # the boosted (seen) ones share the mass
    assert {Sampler(1e-40, seed=1)(logits) for _ in range(5)} == {0}  # as greedy


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


def reference(smollm, ids: list[int], n: int, penalty: float) -> str:
    """Greedy over the model in this process, Hugging Face's repetition rule written out."""
    def penalized(logits, seen):
        for t in set(seen):
            logits[t] = logits[t] / penalty if logits[t] > 0 else logits[t] * penalty
        return logits
    return greedy(smollm, ids, n, penalized)


def _complete(client, **extra) -> str:
    return client.completions.create(model=MODEL, prompt=YES, max_tokens=12, temperature=0,
                                     extra_body=extra).choices[0].text


def test_repetition_penalty_changes_a_repeating_greedy_answer(client, smollm):
    _, tok = smollm
    plain = _complete(client)
    assert plain == " yes" * 12 == reference(smollm, tok.encode(YES), 12, 1.0)
    penalised = _complete(client, repetition_penalty=1.3)
    assert penalised.count("yes") < 3
    assert penalised == reference(smollm, tok.encode(YES), 12, 1.3)
    assert _complete(client, repetition_penalty=1.3) == penalised  # greedy stays greedy
    streamed = client.completions.create(model=MODEL, prompt=YES, max_tokens=12, temperature=0,
                                         stream=True, extra_body={"repetition_penalty": 1.3})
    assert "".join(c.choices[0].text for c in streamed if c.choices) == penalised


def test_min_p_one_is_greedy_and_a_seed_reproduces(client):
    messages = [{"role": "user", "content": "Write a short poem."}]

    def sample(seed: int, **extra) -> str:
        return client.chat.completions.create(
            model=MODEL, messages=messages, temperature=1, max_tokens=16, seed=seed,
            extra_body={"ignore_eos": True, **extra}).choices[0].message.content

    greedy = client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                            max_tokens=16, extra_body={"ignore_eos": True})
    # min_p 1 keeps only the most likely token: whatever the seed, the greedy answer
    assert sample(1, min_p=1.0) == sample(2, min_p=1.0) == greedy.choices[0].message.content
    assert sample(7, min_p=0.1) == sample(7, min_p=0.1)
    assert sample(1) != sample(2)  # without min_p the seeds do differ


@pytest.mark.parametrize("extra, param", [
    ({"min_p": 1.5}, "min_p"), ({"min_p": -0.1}, "min_p"),
    ({"repetition_penalty": 0}, "repetition_penalty"),
    ({"repetition_penalty": 2.01}, "repetition_penalty"),
    ({"repetition_penalty": "1.2"}, "repetition_penalty"),
])
def test_bad_values_are_a_400_naming_the_field(client, extra, param):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                       extra_body=extra)
    assert err.value.body["param"] == param, extra


def test_extreme_but_valid_values_are_answered_not_a_500(client):
    # (the gateway takes them: (0, 2] and [0, 2]; float32 then overflowed at the worker)
    for extra in ({"repetition_penalty": 1e-44, "temperature": 1},
                  {"temperature": 1e-40}):
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": YES}], max_tokens=4, seed=3,
            **{k: v for k, v in extra.items() if k == "temperature"},
            extra_body={k: v for k, v in extra.items() if k != "temperature"})
        assert reply.choices[0].finish_reason in ("length", "stop"), extra


def test_the_native_api_takes_both(deployment, smollm):
    _, tok = smollm
    url = deployment.gateway_url.removesuffix("/v1") + "/generate"

    def generate(**sampling) -> tuple[int, dict]:
        body = {"text": YES, "sampling_params": {"max_new_tokens": 12, "temperature": 0,
                                                 **sampling}}
        request = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=300) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as exc:
            return exc.code, json.load(exc)

    status, got = generate(repetition_penalty=1.3, min_p=0.5)
    assert status == 200 and got["text"] == reference(smollm, tok.encode(YES), 12, 1.3)
    status, got = generate(repetition_penalty=3)
    assert status == 400 and got["error"]["param"] == "sampling_params.repetition_penalty"
