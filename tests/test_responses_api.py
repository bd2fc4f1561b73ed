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
from services.gateway.errors import ApiError
from services.gateway.responses_input import parse_response_request
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
        extra_headers={"X-Session-Id": f"recompute-{uuid.uuid4().hex}"},
        extra_body={"cache_salt": uuid.uuid4().hex})  # reads no other session's KV either
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


def test_without_max_output_tokens_the_deployments_bound_applies(client):
    """The worker's default length, as chat's: to the context's end unless the operator bounds
    it (tests/test_default_answer_length.py); this deployment bounds it at 32, and a response
    cut there says so as one cut at max_output_tokens does."""
    ask = "Count from 1 to 20, separated by commas."  # greedy: 122 tokens, then its end
    reply = client.responses.create(model=MODEL, input=ask, temperature=0)
    assert reply.status == "incomplete" and reply.usage.output_tokens == 32
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output_text == recompute(client, [{"role": "user", "content": ask}], 32)


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
    r2 = client.responses.create(model=MODEL, input=[
        {"role": "user", "content": "One."}, {"role": "user", "content": "Two."}],
        previous_response_id=r1.id, temperature=0, max_output_tokens=2)
    listed = client.get(f"/responses/{r2.id}/input_items?limit=0001&order=asc",
                        cast_to=object)  # a limit with leading zeros is still 1
    assert [i["content"][0]["text"] for i in listed["data"]] == ["One."]
    assert listed["has_more"] is True
    deleted = client.with_options().delete(f"/responses/{r1.id}", cast_to=object)
    assert deleted == {"id": r1.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, previous_response_id=r1.id, input="Again?")
    assert err.value.body["param"] == "previous_response_id"
    # a conversation whose earlier response is gone: the 404 says which, and of what
    with pytest.raises(openai.NotFoundError) as err:
        client.responses.create(model=MODEL, previous_response_id=r2.id, input="Three?")
    assert r1.id in err.value.message and "earlier response" in err.value.message
    assert r2.id in err.value.message
    # store=false: answered, not kept
    unkept = client.responses.create(model=MODEL, input=tagged("Hi."), store=False,
                                     max_output_tokens=2)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "function", "parameters": {}}]}, "tools[0]"),  # no name
    ({"tools": [{"name": "f"}]}, "tools[0]"),  # no type
    ({"tools": [{"type": "web_search"}], "tool_choice": "required"}, "tool_choice"),
    ({"truncation": "oldest"}, "truncation"),
    ({"reasoning": {"effort": "high"}}, "reasoning"),
    ({"text": {"format": {"type": "json_schema", "name": "a", "schema": {}}}}, "text.format"),
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


# The Codex CLI 0.171's every turn (recorded at the wire, descriptions and ids shortened): tools of
# three types that it cannot be told not to send, and its own client_metadata
CODEX = {"stream": False, "tool_choice": "auto", "parallel_tool_calls": True,
         "reasoning": {"summary": "auto"}, "store": False,
         "include": ["reasoning.encrypted_content"], "prompt_cache_key": "01a24ad0",
         "client_metadata": {"session_id": "01a24ad0", "turn_id": "01a24ad0-b0f7"},
         "tools": [{"type": "function", "name": "exec_command", "description": "Runs a command.",
                    "strict": False, "parameters": {"type": "object", "properties": {
                        "cmd": {"type": "string"}}}},
                   {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
                    "tools": [{"type": "function", "name": "close_agent", "parameters": {}}]},
                   {"type": "web_search", "external_web_access": False}]}


def test_the_codex_clis_turn_is_answered_as_without_its_tools(client):
    """It used to be a 400 (client_metadata, then tools), which Codex shows and exits on."""
    ask = {"model": MODEL, "input": tagged("Name a colour."), "temperature": 0,
           "max_output_tokens": 8}
    with_tools = client.post("/responses", body={**ask, **CODEX}, cast_to=object)
    assert [item["type"] for item in with_tools["output"]] == ["message"]  # no tool call
    plain = client.responses.create(**ask, store=False)
    assert with_tools["output"][0]["content"][0]["text"] == plain.output_text
    assert with_tools["status"] == plain.status and plain.output_text


def test_a_reasoning_effort_is_refused_saying_what_is_accepted(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=MODEL, input="Hi", reasoning={"effort": "low"})
    assert 'reasoning.effort must be null or "none"' in err.value.message


def _parse(body: dict):
    return parse_response_request({"model": MODEL, "input": "Hi", **body}, GatewayConfig(),
                                  "t").parsed


# bodies as third-party clients sent them (recorded at the wire): the OpenAI Agents SDK 0.24
# (Runner, OpenAIResponsesModel, ModelSettings(truncation="auto"), (verbosity="medium"),
# (prompt_cache_retention="24h"), (top_logprobs=2)), Codex-style stateless clients (store false
# with reasoning.encrypted_content): each asks for nothing this server lacks
@pytest.mark.parametrize("extra", [
    {"include": [], "tools": [], "instructions": "Be brief."},
    {"include": [], "tools": [], "truncation": "auto"},
    {"include": [], "tools": [], "text": {"verbosity": "medium"}},
    {"include": [], "tools": [], "prompt_cache_retention": "24h"},
    {"include": ["reasoning.encrypted_content"], "store": False, "reasoning": {"summary": "auto"}},
    CODEX,
])
def test_neutral_fields_third_party_clients_send_are_accepted(extra):
    assert not _parse(extra).logprobs


@pytest.mark.parametrize("extra, param", [
    ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ({"text": {"frobnicate": 1}}, "text.frobnicate"),
    ({"include": ["message.input_text.secrets"]}, "include[0]"),
    ({"top_logprobs": 2}, "top_logprobs"),  # without the include that asks for logprobs
    ({"include": ["message.output_text.logprobs"], "top_logprobs": 21}, "top_logprobs"),
])
def test_what_would_change_the_answer_is_refused_before_any_turn(extra, param):
    with pytest.raises(ApiError) as err:
        _parse(extra)
    assert err.value.status == 400 and err.value.param == param


def test_logprobs_as_the_agents_sdk_asks_for_them(client):
    # ModelSettings(top_logprobs=2, max_tokens=6, temperature=0), as the Agents SDK sent it
    body = {"model": MODEL, "include": ["message.output_text.logprobs"], "tools": [],
            "input": [{"content": tagged("Count to five."), "role": "user"}],
            "max_output_tokens": 6, "temperature": 0, "top_logprobs": 2}
    plain = client.responses.create(**body)
    lps = plain.output[0].content[0].logprobs
    assert plain.top_logprobs == 2 and len(lps) == plain.usage.output_tokens == 6
    assert "".join(lp.token for lp in lps) == plain.output_text
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in lps)
    chat = client.chat.completions.create(
        model=MODEL, messages=body["input"], max_tokens=6, temperature=0, logprobs=True,
        top_logprobs=2)
    # the same tokens and values (a prefix computed once or reused from the KV store differs
    # in the last float digits)
    same = [(lp.token, pytest.approx(lp.logprob, abs=1e-3)) for lp in lps]
    assert [(c.token, c.logprob) for c in chat.choices[0].logprobs.content] == same
    events = list(client.responses.create(**body, stream=True))
    deltas = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert [(d.token, d.logprob) for d in deltas] == same
    final = events[-1].response.output[0].content[0].logprobs
    assert [(f.token, f.logprob) for f in final] == [(d.token, d.logprob) for d in deltas]
    assert client.responses.retrieve(plain.id).output[0].content[0].logprobs == lps


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


def test_any_gateway_replica_continues_a_conversation_another_answered(deployment, client):
    """Behind a load balancer (Kubernetes runs 2 gateways and more), each request may reach
    another replica: the scheduler keeps the stored responses for all of them."""
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=deployment.scheduler_target)
    with BackgroundGateway(config) as other:
        second = openai.OpenAI(base_url=other.url, api_key="unused", max_retries=0,
                               timeout=300)
        first = client.responses.create(model=MODEL, input=tagged("My dog is Rex. Hi!"),
                                        temperature=0, max_output_tokens=8)
        follow = second.responses.create(model=MODEL, previous_response_id=first.id,
                                         input="What is my dog's name?", temperature=0,
                                         max_output_tokens=8)
        assert follow.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
        assert client.responses.retrieve(follow.id).output_text == follow.output_text
        assert second.responses.retrieve(first.id).output_text == first.output_text
        second.delete(f"/responses/{first.id}", cast_to=object)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(first.id)
