"""Client-visible OpenAI fidelity on the live embedded deployment (real model, real store),
through the `openai` package: raw completions, seeds, logit_bias, prefill, model aliases.
Reference answers come from a plain greedy loop over SmolLM2 in this process (fp32, CPU)."""
from __future__ import annotations

import openai
import pytest
import torch

from tests.reference_greedy import greedy as reference_greedy

MODEL, HF_ID = "smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct"
CAPITAL = "The capital of France is"


def client(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


def greedy(smollm, ids: list[int], n: int, bias: dict[int, float] | None = None) -> str:
    """The model run on exactly `ids`: argmax (of the biased logits) until EOS or n tokens."""
    def biased(logits, _seen):
        for token, b in (bias or {}).items():
            logits[token] += b
        return logits
    return reference_greedy(smollm, ids, n, biased)


def test_raw_completion_is_the_text_itself(deployment, smollm):
    _, tok = smollm
    reply = client(deployment).completions.create(model=MODEL, prompt=CAPITAL, max_tokens=8,
                                                  temperature=0)
    ids = tok.encode(CAPITAL)
    assert reply.usage.prompt_tokens == len(ids) == 5
    assert reply.choices[0].text == greedy(smollm, ids, 8)


def test_unseeded_sampling_is_random_and_a_seed_reproduces(deployment):
    c = client(deployment)

    def sample(**seed) -> str:
        reply = c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Write a short poem."}],
            temperature=1, max_tokens=24, extra_body={"ignore_eos": True}, **seed)
        return reply.choices[0].message.content

    assert sample() != sample()
    assert sample(seed=1234) == sample(seed=1234)


def test_logit_bias_moves_the_greedy_answer_off_its_first_token(deployment, smollm):
    model, tok = smollm
    messages = [{"role": "user", "content": "Name a colour of the rainbow."}]
    ids = tok.apply_chat_template(messages)
    c = client(deployment)
    plain = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                      temperature=0).choices[0].message.content
    assert plain == greedy(smollm, ids, 6)
    with torch.no_grad():
        first = int(torch.argmax(model.forward([(torch.tensor(ids), model.new_cache(
            len(ids) + 1))], logits_last_only=True)[0].logits[-1]))
    biased = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                       temperature=0, logit_bias={str(first): -100})
    answer = biased.choices[0].message.content
    assert answer != plain
    assert answer == greedy(smollm, ids, 6, bias={first: -100.0})


def test_continue_final_message_continues_the_assistant_text(deployment, smollm):
    _, tok = smollm
    question = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client(deployment).chat.completions.create(
        model=MODEL, messages=question + [{"role": "assistant", "content": CAPITAL}],
        max_tokens=6, temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False})
    ids = tok.encode(tok.render_chat(question, add_generation_prompt=True) + CAPITAL)
    assert reply.usage.prompt_tokens == len(ids)
    answer = reply.choices[0].message.content
    assert answer == greedy(smollm, ids, 6)
    assert "Paris" in answer  # it goes on from "... is", not a new answer


def test_hf_repo_id_alias_and_model_cards(deployment, smollm):
    model, tok = smollm
    c = client(deployment)
    cards = c.models.list().data
    assert [m.id for m in cards] == [MODEL, HF_ID]
    # the gateway's defaults are the stock model's real facts
    assert all(m.model_dump()["max_model_len"] == model.config.max_position for m in cards)
    reply = c.completions.create(model=HF_ID, prompt=CAPITAL, max_tokens=2, temperature=0)
    assert reply.model == MODEL and reply.choices[0].text


def test_token_ids_outside_the_vocabulary_get_400(deployment, smollm):
    _, tok = smollm
    with pytest.raises(openai.BadRequestError) as refused:
        client(deployment).completions.create(model=MODEL, prompt=[1, tok.vocab_size],
                                              max_tokens=2)
    assert refused.value.body["param"] == "prompt"
