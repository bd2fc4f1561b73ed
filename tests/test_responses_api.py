"""OpenAI's Responses API through the live deployment (real processes, the real model, greedy),
read with the `openai` package as apps read it: a client that sends only its new input with
previous_response_id gets the answer a full-history chat gets, token for token, with the
history's KV reused; streams carry OpenAI's events in order; stored responses can be read and
deleted; what this server lacks is refused with a 400 naming the field."""
from __future__ import annotations

import uuid

import openai
import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def client(deployment):
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused",
                         max_retries=0, timeout=300)


def tagged(text: str) -> str:
    """A first message no other test sends, so no earlier conversation is recognised."""
    return f"[{uuid.uuid4().hex[:8]}] {text}"


def recompute(client, messages, max_tokens) -> str:
    reply = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0,
        extra_headers={"X-Session-Id": f"recompute-{uuid.uuid4().hex}"})
    assert reply.usage.prompt_tokens_details.cached_tokens == 0
    return reply.choices[0].message.content


def test_previous_response_id_continues_with_kv_reused_and_the_full_history_answer(client):
    first_input = tagged("My name is Ada. Greet me in one short sentence.")
    r1 = client.responses.create(model=MODEL, input=first_input, instructions="Be brief.",
                                 temperature=0, max_output_tokens=12)
    assert r1.object == "response" and r1.output_text
    assert r1.status in ("completed", "incomplete") and r1.usage.input_tokens > 10
    assert r1.usage.output_tokens >= 1 and r1.output[0].role == "assistant"
    r2 = client.responses.create(model=MODEL, previous_response_id=r1.id,
                                 input="What is my name?", instructions="Be brief.",
                                 temperature=0, max_output_tokens=12)
    assert r2.previous_response_id == r1.id
    # the first turn's prompt and answer were reused, not recomputed
    assert r2.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens
    assert r2.usage.input_tokens > r1.usage.input_tokens + r1.usage.output_tokens
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": first_input},
               {"role": "assistant", "content": r1.output_text},
               {"role": "user", "content": "What is my name?"}]
    assert r2.output_text == recompute(client, history, 12)
    # cut at max_output_tokens: OpenAI's incomplete status and reason
    r3 = client.responses.create(model=MODEL, previous_response_id=r2.id,
                                 input="Tell me a long story about it.", temperature=0,
                                 max_output_tokens=3)
    assert r3.status == "incomplete" and r3.incomplete_details.reason == "max_output_tokens"
    assert r3.usage.output_tokens == 3


def test_a_stream_carries_openais_events_in_order_and_the_plain_answer(client):
    first = client.responses.create(model=MODEL, input=tagged("Name a colour."),
                                    temperature=0, max_output_tokens=8)
    ask = {"model": MODEL, "previous_response_id": first.id, "input": "And another one?",
           "temperature": 0, "max_output_tokens": 10}
    events = list(client.responses.create(**ask, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", events[-1].type]
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text and text == events[-4].text == final.output_text
    assert final.usage.input_tokens_details.cached_tokens > 0
    plain = client.responses.create(**ask)
    assert plain.output_text == text
    # the streamed response was stored as well
    assert client.responses.retrieve(final.id).output_text == text


def test_stored_responses_are_read_listed_and_deleted(client):
    words = tagged("Say yes.")
    r1 = client.responses.create(model=MODEL, input=words, temperature=0, max_output_tokens=4,
                                 metadata={"ticket": "42"})
    got = client.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    assert got.metadata == {"ticket": "42"}
    items = client.responses.input_items.list(r1.id)
    assert [i.content[0].text for i in items.data] == [words]
    deleted = client.with_options().delete(f"/responses/{r1.id}", cast_to=object)
    assert deleted == {"id": r1.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, previous_response_id=r1.id, input="Again?")
    assert err.value.body["param"] == "previous_response_id"
    # store=false: answered, not kept
    unkept = client.responses.create(model=MODEL, input=tagged("Hi."), store=False,
                                     max_output_tokens=2)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "name": "f", "parameters": {}}]}, "tools"),
    ({"truncation": "auto"}, "truncation"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"text": {"format": {"type": "json_object"}}}, "text.format"),
    ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]},
     "input[0].type"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]},
     "input[0].content[0]"),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role"),
    ({"input": ""}, "input"),
    ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
    ({"max_output_tokens": 1 << 40}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"frobnicate": 1}, "frobnicate"),
])
def test_what_this_server_lacks_is_refused_naming_the_field(client, extra, param):
    body = {"model": MODEL, "input": "Hello", **extra}
    with pytest.raises(openai.BadRequestError) as err:
        client.post("/responses", body=body, cast_to=object)
    assert err.value.status_code == 400 and err.value.body["param"] == param


def test_a_tenant_reaches_no_other_tenants_responses(deployment):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=deployment.scheduler_target,
                           api_keys="erin:key-erin-123,frank:key-frank-456")
    with BackgroundGateway(config) as gw:
        erin, frank, nobody = (openai.OpenAI(base_url=gw.url, api_key=k, max_retries=0,
                                             timeout=300)
                               for k in ("key-erin-123", "key-frank-456", "wrong"))
        mine = erin.responses.create(model=MODEL, input=tagged("Say hi."), temperature=0,
                                     max_output_tokens=4)
        for call in (lambda: frank.responses.retrieve(mine.id),
                     lambda: frank.responses.input_items.list(mine.id),
                     lambda: frank.delete(f"/responses/{mine.id}", cast_to=object),
                     lambda: frank.responses.create(model=MODEL, input="Go on.",
                                                    previous_response_id=mine.id)):
            with pytest.raises(openai.NotFoundError):
                call()
        with pytest.raises(openai.AuthenticationError):
            nobody.responses.retrieve(mine.id)
        assert erin.responses.retrieve(mine.id).output_text == mine.output_text
