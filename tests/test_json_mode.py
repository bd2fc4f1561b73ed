"""JSON mode (response_format {"type": "json_object"}; Responses' text.format): the answer is
one JSON object that Python's parser reads, greedy and sampled, ending there; through the
worker's TurnRunner with SmolLM2, then the live deployment with the `openai` package as
instructor's JSON mode calls it, where the next turn reads the answer's KV as any other's."""
from __future__ import annotations

import json

import openai
import pytest

from compute_worker import json_grammar
from compute_worker.engine import Engine
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.runtime.gen import common_pb2
from tests.test_gateway_openai import MODEL, client

ASKS = ["Describe a cat with its name and age.", "List three fruits.", "Say hello."]


@pytest.fixture(scope="module")
def runner(smollm):
    model, tok = smollm
    engine = Engine(model)
    yield TurnRunner(engine, make_connector(None, model, "json", common_pb2.KV_FORMAT_KV), tok)
    engine.stop()


def _answer(runner, ask: str, **fields) -> tuple[str, str]:
    turn = common_pb2.TurnRequest(session_id="json", messages=[
        common_pb2.ChatMessage(role="user", content=ask)], max_tokens=100, **fields)
    text, last = "", None
    for _, piece, last in runner.run(turn):
        text += piece
    return text, last.finish_reason


@pytest.mark.parametrize("ask", ASKS[:2])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_answer_is_one_json_object_greedy_or_sampled(runner, ask, temperature):
    text, finish = _answer(runner, ask, json_object=True, temperature=temperature, seed=11)
    assert finish == "stop" and isinstance(json.loads(text), dict), text


def test_without_json_mode_the_same_ask_is_not_json(runner):
    plain, _ = _answer(runner, ASKS[0], temperature=0)  # prose, or JSON in a fence
    with pytest.raises(ValueError):
        json.loads(plain)


def test_an_answer_cut_short_is_the_beginning_of_an_object(runner):
    """This small model, asked to say hello in JSON, nests the same key again and again: cut
    at max_tokens ("length"), what it wrote is still the beginning of one JSON object."""
    text, finish = _answer(runner, ASKS[2], json_object=True)
    state = json_grammar.feed(json_grammar.START, text.encode())
    assert finish == "length" and state is not None and not json_grammar.complete(state)


def test_json_mode_through_the_gateway_and_the_next_turn_reads_its_kv(deployment):
    c = client(deployment.gateway_url)
    messages = [{"role": "system", "content": "You answer in JSON."},
                {"role": "user", "content": "Give a colour and its hex code."}]
    reply = c.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                      max_tokens=120, response_format={"type": "json_object"})
    answer = reply.choices[0].message.content
    assert isinstance(json.loads(answer), dict) and reply.choices[0].finish_reason == "stop"
    messages += [{"role": "assistant", "content": answer},
                 {"role": "user", "content": "Another one."}]
    again = c.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                      max_tokens=120, response_format={"type": "json_object"})
    assert isinstance(json.loads(again.choices[0].message.content), dict)
    assert again.usage.prompt_tokens_details.cached_tokens >= reply.usage.prompt_tokens
    response = c.responses.create(model=MODEL, input="Give a city and its country.",
                                  text={"format": {"type": "json_object"}}, temperature=0,
                                  max_output_tokens=120)
    assert isinstance(json.loads(response.output_text), dict)
    assert response.text.format.type == "json_object"
    with pytest.raises(openai.BadRequestError) as refused:  # a schema is not kept half-way
        c.chat.completions.create(model=MODEL, messages=messages, response_format={
            "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}})
    assert refused.value.body["param"] == "response_format"
