"""`n` > 1 on chat and completions, through the live deployment and the real model, read with the
`openai` package: n choices indexed in order, each the answer a single request with the seed
plus its index gives, the prompt counted once in the usage, a seeded request answered the same
again; with several prompts, prompt by prompt; streamed, the same choices interleaved in one
stream; what is refused is a 400 naming `n`."""
from __future__ import annotations

import uuid

import openai
import pytest

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


def question() -> list[dict]:
    """A conversation no other test sends, so nothing earlier is recognised."""
    return [{"role": "user", "content": f"[{uuid.uuid4().hex[:8]}] Name a fruit and a colour."}]


def test_chat_n_choices_are_the_seeded_single_answers(client):
    messages = question()
    sampled = dict(model=MODEL, messages=messages, max_tokens=10, temperature=1.0, seed=1234)
    many = client.chat.completions.create(n=3, **sampled)
    assert [c.index for c in many.choices] == [0, 1, 2]
    texts = [c.message.content for c in many.choices]
    assert all(c.message.role == "assistant" and c.finish_reason for c in many.choices)
    assert len(set(texts)) > 1  # three seeds: (almost surely) not one answer three times
    singles = [client.chat.completions.create(**{**sampled, "seed": 1234 + j})
               for j in range(3)]
    assert texts == [s.choices[0].message.content for s in singles]
    # the prompt is read once (OpenAI's n), the answers are summed
    assert many.usage.prompt_tokens == singles[0].usage.prompt_tokens
    assert many.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    assert many.usage.total_tokens == many.usage.prompt_tokens + many.usage.completion_tokens
    again = client.chat.completions.create(n=3, **sampled)
    assert [c.message.content for c in again.choices] == texts


def test_greedy_n_choices_are_one_answer_n_times(client):
    many = client.chat.completions.create(model=MODEL, messages=question(), max_tokens=8,
                                          temperature=0, n=2)
    assert many.choices[0].message.content == many.choices[1].message.content


def test_completions_n_with_several_prompts_go_prompt_by_prompt(client):
    tag = uuid.uuid4().hex[:8]
    prompts = [f"[{tag}] The sky is", f"[{tag}] Apples are"]
    sampled = dict(model=MODEL, max_tokens=6, temperature=1.0, seed=77)
    many = client.completions.create(prompt=prompts, n=2, **sampled)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    for i, prompt in enumerate(prompts):
        for j in range(2):
            single = client.completions.create(prompt=prompt, **{**sampled, "seed": 77 + j})
            assert many.choices[2 * i + j].text == single.choices[0].text, (i, j)
    lone = [client.completions.create(prompt=p, **sampled) for p in prompts]
    assert many.usage.prompt_tokens == sum(r.usage.prompt_tokens for r in lone)


@pytest.mark.parametrize("extra", [
    {"n": 257},  # more choices than a request may hold
    {"n": 0},
    {"n": 2 ** 40},
    {"n": "2"},
])
def test_refused_n_is_a_400_naming_it(client, extra):
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=question(), max_tokens=4,
                                       extra_body=extra)
    assert refused.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as refused:  # 129 prompts x 2 > 256 choices
        client.completions.create(model=MODEL, prompt=["a"] * 129, n=2, max_tokens=1)
    assert refused.value.body["param"] == "n"


def test_n_choices_in_a_named_session_and_the_next_turn_reuses_its_history(client):
    session = f"n-{uuid.uuid4().hex}"
    messages = question()
    many = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=8, temperature=1.0, seed=5, n=2,
        extra_headers={"X-Session-Id": session})
    assert many.headers["x-bidaw-session"] == session
    first = many.parse()
    kept = first.choices[1].message.content  # the client keeps the second answer
    follow = client.chat.completions.create(
        model=MODEL, max_tokens=4, temperature=0, extra_headers={"X-Session-Id": session},
        messages=messages + [{"role": "assistant", "content": kept},
                             {"role": "user", "content": "Why?"}])
    # the history's KV is reused whichever answer was kept (at least the first prompt's)
    assert follow.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1


def test_streamed_choices_are_the_whole_answers_interleaved(client):
    messages = question()
    sampled = dict(model=MODEL, messages=messages, max_tokens=10, temperature=1.0, seed=99,
                   n=3)
    whole = client.chat.completions.create(**sampled)
    texts, finish, ids, usage = {}, {}, set(), None
    for chunk in client.chat.completions.create(stream=True,
                                                stream_options={"include_usage": True},
                                                **sampled):
        ids.add(chunk.id)
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    assert len(ids) == 1  # one answer
    assert [texts[i] for i in range(3)] == [c.message.content for c in whole.choices]
    assert [finish[i] for i in range(3)] == [c.finish_reason for c in whole.choices]
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        whole.usage.prompt_tokens, whole.usage.completion_tokens)


def test_a_streamed_batch_of_prompts_is_the_whole_batch(client):
    tag = uuid.uuid4().hex[:8]
    body = dict(model=MODEL, prompt=[f"[{tag}] One, two,", f"[{tag}] Red, green,"],
                max_tokens=5, temperature=0, n=2)
    whole = client.completions.create(**body)
    texts = {}
    for chunk in client.completions.create(stream=True, **body):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    assert [texts[i] for i in range(4)] == [c.text for c in whole.choices]
