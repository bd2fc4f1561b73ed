"""vLLM's min_tokens (SGLang's min_new_tokens): no end-of-sequence token and no stop string
before that many tokens. On hand-made logits, then greedy with the real model through the live
deployment's OpenAI and native APIs, streamed and not."""
from __future__ import annotations

import json
import urllib.request

import openai
import pytest
import torch

from compute_worker.sampling import Sampler
from services.runtime.gen import common_pb2
from services.runtime.turn_bounds import turn_bounds_problem

MODEL = "smollm2-135m"
SKY = [{"role": "user", "content": "Is the sky blue? Answer yes or no."}]  # greedy: "No." + EOS
SUM = [{"role": "user", "content": "What is 2+2? Answer with a number only."}]  # "2 + 2 = 4"


def test_the_end_token_is_barred_until_the_minimum():
    eos = 7
    sampler = Sampler(0.0, min_tokens=3, eos=[eos, 9])
    logits = torch.zeros(10)
    logits[eos], logits[9], logits[2] = 5.0, 4.0, 1.0  # eos first, the other end id second
    assert [sampler(logits) for _ in range(4)] == [2, 2, 2, eos]
    assert Sampler(0.0, eos=[eos])(logits) == eos  # no minimum: the end as usual


def test_a_minimum_above_the_maximum_is_refused_by_name():
    turn = common_pb2.TurnRequest(max_tokens=4, min_tokens=5)
    assert "min_tokens 5 is above max_tokens 4" in turn_bounds_problem(turn)
    assert turn_bounds_problem(common_pb2.TurnRequest(min_tokens=5)) is None  # default max
    assert "above 4294967295" in turn_bounds_problem(common_pb2.TurnRequest(min_tokens=2**40))


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


def _chat(client, messages, **args) -> tuple[str, str, int, str]:
    """(text, finish_reason, completion tokens, the same request's streamed text)."""
    args = dict(model=MODEL, messages=messages, temperature=0, **args)
    reply = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(stream=True,
                                                 stream_options={"include_usage": True}, **args))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    return (reply.choices[0].message.content, reply.choices[0].finish_reason,
            reply.usage.completion_tokens, streamed)


def test_the_answer_goes_on_past_its_end_until_the_minimum(client):
    short, why, n, _ = _chat(client, SKY)
    assert why == "stop" and n < 6  # the model ends at once without a minimum
    text, why, n, streamed = _chat(client, SKY, max_tokens=24, extra_body={"min_tokens": 12})
    assert n >= 12 and text.startswith(short) and len(text) > len(short) + 10
    assert streamed == text
    text, why, n, _ = _chat(client, SKY, max_tokens=12, extra_body={"min_tokens": 12})
    assert (why, n) == ("length", 12)


def test_without_max_tokens_the_default_length_rises_to_the_minimum(client):
    # the deployment's default answer length is 32 tokens
    _, why, n, _ = _chat(client, SKY, extra_body={"min_tokens": 40})
    assert (why, n) == ("length", 40)


def test_a_stop_string_before_the_minimum_does_not_end_the_answer(client):
    cut, why, n, _ = _chat(client, SUM, stop=["4"])
    assert (cut, why) == ("2 + 2 = ", "stop") and n < 12
    text, _, n, streamed = _chat(client, SUM, stop=["4"], max_tokens=16,
                                 extra_body={"min_tokens": 12})
    assert text.startswith("2 + 2 = 4") and n >= 12 and streamed == text


def test_bad_minimums_are_a_400_naming_the_field(client):
    for body in ({"max_tokens": 4, "min_tokens": 5}, {"min_tokens": -1},
                 {"min_tokens": 2**40}, {"min_tokens": "3"}, {"min_tokens": True}):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=MODEL, messages=SKY, extra_body=body)
        assert err.value.body["param"] == "min_tokens", body


def test_the_native_api_takes_min_new_tokens(deployment):
    url = deployment.gateway_url.removesuffix("/v1") + "/generate"
    text = ("<|im_start|>user\nIs the sky blue? Answer yes or no.<|im_end|>\n"
            "<|im_start|>assistant\n")  # SKY in the chat template, sent as raw text

    def tokens(**least) -> int:
        body = {"text": text, "sampling_params": {"max_new_tokens": 10, "temperature": 0,
                                                  **least}}
        request = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as reply:
            return json.load(reply)["meta_info"]["completion_tokens"]

    assert tokens() < 6 and tokens(min_new_tokens=10) == 10
