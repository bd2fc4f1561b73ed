"""Scoring a text as evaluation harnesses do (lm-evaluation-harness's `local-completions`): echo,
prompt logprobs, max_tokens 0 and batches of prompts on /v1/completions, through the live
deployment and the real model. Prompt logprobs equal log_softmax of a reference forward pass in
this process (also when the prompt's prefix KV is stored), echo is the prompt then the answer, a
batch answers as its prompts alone, and what is refused is a 400 naming the field."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
import torch

from tests.reference_greedy import greedy

MODEL = "smollm2-135m"
CONTEXT = ("Question: Which planet is known as the Red Planet because of the iron oxide on its "
           "surface?\nAnswer:")
ENDINGS = [" Mars", " Venus", " Jupiter"]


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


def _post(deployment, path: str, payload: dict, headers: dict | None = None):
    url = deployment.gateway_url.removesuffix("/v1") + path
    request = urllib.request.Request(url, json.dumps(payload).encode(),
                                     {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=300) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@torch.no_grad()
def reference(smollm, ids: list[int]) -> torch.Tensor:
    """log_softmax [len(ids) - 1, vocab] of one forward pass: row p - 1 scores position p."""
    model, _ = smollm
    logits = model.forward([(torch.tensor(ids), model.new_cache(len(ids) + 1))],
                           logits_last_only=False)[0].logits.float()
    return torch.log_softmax(logits[:-1], dim=-1)


def _check_prompt(lp, ids: list[int], ref: torch.Tensor, top: int) -> float:
    """The echoed prompt's logprobs against the reference; returns the largest difference."""
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    got = torch.tensor(lp.token_logprobs[1:len(ids)])
    want = ref[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
    worst = float((got - want).abs().max())
    assert worst < 1e-4
    for p in (1, len(ids) // 2, len(ids) - 1):  # the alternatives are the reference's top k
        values, _ = torch.topk(ref[p - 1], top)
        assert sorted(lp.top_logprobs[p].values(), reverse=True) == pytest.approx(
            values.tolist(), abs=1e-4)
    return worst


def test_echo_gives_the_prompt_then_the_answer_with_the_reference_s_logprobs(
        client, smollm, deployment):
    _, tok = smollm
    prompt = CONTEXT + " Mars. It is the fourth planet from the Sun, and its"
    ids = tok.encode(prompt)
    plain = client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=4)
    reply = client.completions.create(model=MODEL, prompt=prompt, temperature=0, max_tokens=4,
                                      echo=True, logprobs=2)
    choice = reply.choices[0]
    assert choice.text == prompt + plain.choices[0].text
    lp = choice.logprobs
    n = len(ids) + reply.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(n)]
    _check_prompt(lp, ids, reference(smollm, ids), 2)
    answer = tok.encode(plain.choices[0].text)
    full = reference(smollm, ids + answer)
    assert lp.token_logprobs[len(ids):] == pytest.approx(
        [float(full[len(ids) - 1 + i, t]) for i, t in enumerate(answer)], abs=1e-4)
    chunks = list(client.completions.create(model=MODEL, prompt=prompt, temperature=0,
                                            max_tokens=4, echo=True, logprobs=2, stream=True))
    assert chunks[0].choices[0].text == prompt  # vLLM's order: the prompt is the first chunk
    assert "".join(c.choices[0].text for c in chunks if c.choices) == choice.text
    streamed = [v for c in chunks if c.choices and c.choices[0].logprobs
                for v in c.choices[0].logprobs.token_logprobs]
    assert streamed[0] is None and streamed[1:] == pytest.approx(lp.token_logprobs[1:],
                                                                 abs=1e-5)


def test_prompt_logprobs_are_exact_when_the_prefix_kv_is_stored(client, smollm):
    _, tok = smollm
    session = {"X-Session-Id": "echo-cached-prefix"}
    first = CONTEXT + " Mars."
    client.completions.create(model=MODEL, prompt=first, max_tokens=2, temperature=0,
                              extra_headers=session)
    longer = first + " It is the fourth planet from the Sun, and it has two moons."
    ids = tok.encode(longer)
    reply = client.completions.create(model=MODEL, prompt=longer, max_tokens=0, echo=True,
                                      logprobs=3, temperature=0, extra_headers=session)
    assert reply.choices[0].text == longer and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 0 and reply.usage.prompt_tokens == len(ids)
    assert reply.usage.prompt_tokens_details.cached_tokens == 0  # recomputed, not restored
    _check_prompt(reply.choices[0].logprobs, ids, reference(smollm, ids), 3)
    again = client.completions.create(model=MODEL, prompt=longer + " Its", max_tokens=1,
                                      temperature=0, extra_headers=session)
    assert again.usage.prompt_tokens_details.cached_tokens > 0  # its KV was still saved


def test_a_batch_answers_as_its_prompts_alone(client, smollm):
    _, tok = smollm
    prompts = [CONTEXT, "The capital of France is", "1, 2, 3, 4,"]
    reply = client.completions.create(model=MODEL, prompt=prompts, temperature=0, max_tokens=6)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    for prompt, choice in zip(prompts, reply.choices):
        assert choice.text == greedy(smollm, tok.encode(prompt), 6)
    singles = [client.completions.create(model=MODEL, prompt=p, temperature=0, max_tokens=6)
               for p in prompts]
    assert [c.text for c in reply.choices] == [s.choices[0].text for s in singles]
    assert reply.usage.prompt_tokens == sum(s.usage.prompt_tokens for s in singles)
    assert reply.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)


def test_lm_eval_loglikelihood_equals_the_reference(client, smollm):
    """What lm-eval's local-completions sends (token ids, a batch, echo, logprobs 1,
    max_tokens 0) and computes: the continuation's summed logprob and whether greedy decoding
    would produce it."""
    _, tok = smollm
    context = tok.encode(CONTEXT)
    requests = [context + tok.encode(e) for e in ENDINGS]
    reply = client.completions.create(model=MODEL, prompt=requests, temperature=0, max_tokens=0,
                                      echo=True, logprobs=1, seed=1234)
    for ids, choice in zip(requests, reply.choices):
        assert choice.text == tok.decode(ids)  # a token-id prompt, decoded
        lp = choice.logprobs
        assert len(lp.tokens) == len(ids)
        got = sum(lp.token_logprobs[len(context):])
        greedy_got = all(max(top, key=top.get) == token for token, top in
                         zip(lp.tokens[len(context):], lp.top_logprobs[len(context):]))
        ref = reference(smollm, ids)
        rows = torch.arange(len(context) - 1, len(ids) - 1)
        want = float(ref[rows, torch.tensor(ids[len(context):])].sum())
        assert got == pytest.approx(want, abs=1e-4)
        assert greedy_got == bool((ref[rows].argmax(-1) == torch.tensor(
            ids[len(context):])).all())



def test_lm_eval_s_own_payload_max_tokens_1_scores_the_continuation(client, smollm):
    """lm-eval really sends max_tokens 1 and sums token_logprobs[ctxlen:-1], dropping the one
    answer token: so the answer's token must be there even when it is the end token (the answer
    then stops, its text empty), or a continuation token would silently be dropped instead."""
    model, tok = smollm
    ended = ("<|im_start|>user\nWhat is 2+2? Answer with one number.<|im_end|>\n"
             "<|im_start|>assistant\nThe answer is 4.")
    pairs = [(tok.encode(CONTEXT), tok.encode(" Mars")), (tok.encode(ended[:-1]), tok.encode("."))]
    requests = [c + e for c, e in pairs]
    reply = client.completions.create(model=MODEL, prompt=requests, temperature=0, max_tokens=1,
                                      echo=True, logprobs=1, seed=1234)
    nexts = []
    for (context, _), ids, choice in zip(pairs, requests, reply.choices):
        ref = reference(smollm, ids + [0])  # + a placeholder: row len(ids) - 1 scores the answer
        nexts.append(int(ref[len(ids) - 1].argmax()))
        lp = choice.logprobs
        assert len(lp.token_logprobs) == len(ids) + 1  # the prompt's then the one answer token
        assert lp.token_logprobs[-1] == pytest.approx(float(ref[len(ids) - 1, nexts[-1]]),
                                                      abs=1e-4)
        rows = torch.arange(len(context) - 1, len(ids) - 1)
        assert sum(lp.token_logprobs[len(context):-1]) == pytest.approx(
            float(ref[rows, torch.tensor(ids[len(context):])].sum()), abs=1e-4)
        assert all(t == max(top.values()) for t, top in zip(
            lp.token_logprobs[len(context):-1], lp.top_logprobs[len(context):-1])) == bool(
            (ref[rows].argmax(-1) == torch.tensor(ids[len(context):])).all())
    assert nexts[1] in model.config.eos_token_ids  # the case this test is about
    assert reply.choices[1].finish_reason == "stop"
    assert reply.choices[1].text == tok.decode(requests[1])  # the end token adds no text


def test_generate_gives_sglang_s_input_token_logprobs(deployment, client):
    text = "The capital of France is Paris"
    status, body = _post(deployment, "/generate", {
        "text": text, "return_logprob": True, "logprob_start_len": 0, "top_logprobs_num": 1,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    assert status == 200, body
    meta = body["meta_info"]
    rows = meta["input_token_logprobs"]
    assert len(rows) == meta["prompt_tokens"] and rows[0][0] is None
    assert meta["input_top_logprobs"][0] is None and len(meta["input_top_logprobs"][1]) == 1
    echo = client.completions.create(model=MODEL, prompt=text, max_tokens=0, echo=True,
                                     logprobs=1)
    assert [r[0] for r in rows[1:]] == pytest.approx(
        echo.choices[0].logprobs.token_logprobs[1:], abs=1e-5)


@pytest.mark.parametrize("payload, headers, param", [
    ({"prompt": ["x"] * 257}, None, "prompt"),
    ({"prompt": ["x", ""]}, None, "prompt[1]"),
    ({"prompt": [[1, 2], [49152]]}, None, "prompt[1]"),
    ({"prompt": ["x", [1, 2.5]]}, None, "prompt[1]"),
    ({"prompt": ["x", "y"]}, {"X-Session-Id": "one"}, "X-Session-Id"),
    ({"prompt": "x", "max_tokens": 0}, None, "max_tokens"),  # no echo: nothing to return
    ({"prompt": "x", "max_tokens": 0, "echo": True, "min_tokens": 1}, None, "min_tokens"),
    ({"prompt": "x", "echo": 1}, None, "echo"),
    ({"prompt": "x", "echo": True, "suffix": "y"}, None, "suffix"),
])
def test_refusals_are_400s_naming_the_field(deployment, payload, headers, param):
    status, body = _post(deployment, "/v1/completions", {"model": MODEL, **payload}, headers)
    assert status == 400 and body["error"]["param"] == param, body
