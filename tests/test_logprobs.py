"""OpenAI's logprobs (chat, legacy completions) and SGLang's return_logprob: the worker's rule on
hand-made logits, token bytes from the real tokenizer, then the real model through the live
deployment: shapes the `openai` package parses, values equal to log_softmax of a reference
forward pass in this process, streamed equal to unstreamed, every token exactly once."""
from __future__ import annotations

import json
import math
import urllib.request

import openai
import pytest
import torch

from compute_worker.logprobs import TokenSpeller, step_logprobs
from compute_worker.sampling import Sampler
from services.gateway.logprobs import CompletionOffsets, chat
from services.runtime.gen import common_pb2

MODEL = "smollm2-135m"
COUNT = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]  # ASCII
JAPANESE = "The Japanese word for water is 水. The Japanese word for fire is"  # multi-byte


def test_step_logprobs_are_the_raw_distribution_and_the_chosen_is_always_given():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.125, 0.125])) + 3.0  # any offset
    got = step_logprobs(logits, 2, 2)
    assert got.token == 2 and got.logprob == pytest.approx(math.log(0.125))
    assert [t for t, _ in got.top] == [0, 1]  # the chosen one is not among them
    assert [lp for _, lp in got.top] == pytest.approx([math.log(0.5), math.log(0.25)])
    assert step_logprobs(logits, 0, 0).top == []
    # bias, penalties and temperature change the choice, never the logprobs reported
    s = Sampler(0.7, seed=1, logit_bias={3: 100.0}, repetition_penalty=2.0, prompt=[0],
                logprobs=1)
    assert s(logits) == 3
    assert s.last_logprobs.logprob == pytest.approx(math.log(0.125))
    assert s.last_logprobs.top[0][0] == 0
    assert Sampler(0.0)(logits) == 0 and Sampler(0.0).last_logprobs is None  # off: nothing


def test_token_bytes_join_into_the_text(smollm):
    _, tok = smollm
    speller = TokenSpeller(tok)
    text = "Hello, café 日本 😀"
    ids = tok.encode(text)
    assert b"".join(speller(i) for i in ids).decode() == text
    assert any(not _utf8(speller(i)) for i in ids)  # some token holds part of a character
    assert speller(tok.eos_token_ids[0]) == b"<|im_end|>"


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
        return True
    except UnicodeDecodeError:
        return False


def _record(token: int, logprob: float, raw: bytes, top=()) -> common_pb2.StepLogprobs:
    return common_pb2.StepLogprobs(
        chosen=common_pb2.TokenLogprob(token_id=token, logprob=logprob, token=raw),
        top=[common_pb2.TokenLogprob(token_id=t, logprob=lp, token=r) for t, lp, r in top])


def test_gateway_shapes_offsets_and_partial_characters():
    steps = [_record(1, -0.5, b"Hi", [(1, -0.5, b"Hi"), (2, -1.5, b"Yo")]),
             _record(3, -float("inf"), b" \xe6"), _record(4, -0.25, b"\xb0\xb4")]
    shaped = chat(steps)["content"]
    assert shaped[0] == {"token": "Hi", "logprob": -0.5, "bytes": [72, 105], "top_logprobs": [
        {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
        {"token": "Yo", "logprob": -1.5, "bytes": [89, 111]}]}
    assert shaped[1]["token"] == " \\xe6" and shaped[1]["logprob"] == -9999.0
    assert bytes(shaped[1]["bytes"] + shaped[2]["bytes"]).decode() == " 水"
    offsets = CompletionOffsets()
    first, second = offsets.shape(steps[:1]), offsets.shape(steps[1:])
    assert first == {"tokens": ["Hi"], "token_logprobs": [-0.5],
                     "top_logprobs": [{"Hi": -0.5, "Yo": -1.5}], "text_offset": [0]}
    assert second["text_offset"] == [2, 2 + len(" \\xe6")]  # counted on across chunks


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


@torch.no_grad()
def reference(smollm, prompt: list[int], answer: list[int]) -> list[float]:
    """log_softmax of one forward pass over prompt + answer, at each answer token."""
    model, _ = smollm
    ids = prompt + answer
    logits = model.forward([(torch.tensor(ids), model.new_cache(len(ids) + 1))],
                           logits_last_only=False)[0].logits.float()
    rows = torch.log_softmax(logits[len(prompt) - 1:len(ids) - 1], dim=-1)
    return [float(rows[i, t]) for i, t in enumerate(answer)]


def test_chat_logprobs_are_the_model_s_and_streamed_equal_unstreamed(client, smollm):
    _, tok = smollm
    args = dict(model=MODEL, messages=COUNT, temperature=0, max_tokens=10, logprobs=True,
                top_logprobs=3)
    reply = client.chat.completions.create(**args)
    choice = reply.choices[0]
    content = choice.logprobs.content
    assert choice.finish_reason == "length" and len(content) == reply.usage.completion_tokens
    assert "".join(e.token for e in content) == choice.message.content
    for e in content:  # greedy: the chosen token is the most likely one
        assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token
        assert e.logprob == max(t.logprob for t in e.top_logprobs)
        assert bytes(e.bytes).decode() == e.token
    answer = tok.encode(choice.message.content)
    assert [e.logprob for e in content] == pytest.approx(
        reference(smollm, tok.apply_chat_template(COUNT), answer), abs=1e-4)
    chunks = list(client.chat.completions.create(stream=True, **args))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs
                for e in c.choices[0].logprobs.content]
    assert [(e.token, e.bytes) for e in streamed] == [(e.token, e.bytes) for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content],
                                                          abs=1e-5)
    for c in chunks:  # each chunk carries the tokens of its own text
        if c.choices and c.choices[0].delta.content:
            assert "".join(e.token for e in c.choices[0].logprobs.content) == \
                c.choices[0].delta.content
    plain = client.chat.completions.create(model=MODEL, messages=COUNT, temperature=0,
                                           max_tokens=10)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == choice.message.content


def test_completion_logprobs_and_held_back_characters(client):
    args = dict(model=MODEL, prompt=JAPANESE, temperature=0, max_tokens=12, logprobs=2)
    reply = client.completions.create(**args)
    lp = reply.choices[0].logprobs
    n = reply.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(n)]
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert len(top) <= 2 and logprob == max(top.values()) and top[token] == logprob
    assert any("\\x" in t for t in lp.tokens)  # a character split across tokens
    chunks = list(client.completions.create(stream=True, **args))
    tokens = [t for c in chunks if c.choices and c.choices[0].logprobs
              for t in c.choices[0].logprobs.tokens]
    offsets = [o for c in chunks if c.choices and c.choices[0].logprobs
               for o in c.choices[0].logprobs.text_offset]
    assert tokens == lp.tokens and offsets == lp.text_offset  # each exactly once, in order
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reply.choices[0].text


def test_native_generate_returns_sglang_s_logprobs(deployment, client):
    url = deployment.gateway_url.removesuffix("/v1") + "/generate"
    body = {"text": "The capital of France is", "return_logprob": True, "top_logprobs_num": 2,
            "return_text_in_logprobs": True, "logprob_start_len": -1,
            "sampling_params": {"max_new_tokens": 6, "temperature": 0}}

    def post(payload: dict) -> bytes:
        request = urllib.request.Request(url, json.dumps(payload).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.read()

    meta = json.loads(post(body))["meta_info"]
    out, top = meta["output_token_logprobs"], meta["output_top_logprobs"]
    assert len(out) == len(top) == meta["completion_tokens"]
    for (logprob, token, text), alternatives in zip(out, top):
        assert len(alternatives) == 2 and alternatives[0][:3] == [logprob, token, text]
    events = [e for e in post({**body, "stream": True}).decode().split("\n\n") if e]
    last = json.loads(events[-2][len("data: "):])["meta_info"]  # before [DONE]
    # the same tokens and texts; the values to float precision (the prompt sent again reads
    # the first one's KV, so its last token is computed on a restored cache, not in a prefill)
    assert [row[1:] for row in last["output_token_logprobs"]] == [row[1:] for row in out]
    assert [row[0] for row in last["output_token_logprobs"]] == pytest.approx(
        [row[0] for row in out], abs=1e-5)
    assert [[a[1:] for a in alts] for alts in last["output_top_logprobs"]] == \
        [[a[1:] for a in alts] for alts in top]
    completion = client.completions.create(model=MODEL, prompt=body["text"], temperature=0,
                                           max_tokens=6, logprobs=2)
    assert [row[0] for row in out] == pytest.approx(
        completion.choices[0].logprobs.token_logprobs, abs=1e-5)
