"""Every field of a chat or completion body is honoured, accepted as metadata that cannot change
the answer, or refused with a 400 naming it (OpenAI's error shape) — never silently ignored.
Through a real gateway in front of a fake scheduler; a refused body never reaches it."""
from __future__ import annotations

import http.client
import json

import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway
from tests.fake_scheduler import fake_on_a_port
from tests.test_gateway_api import assert_error, post

MODEL = "smollm2-135m"
HISTORY = [{"role": "user", "content": "What is 2+2?"}]
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}


fake = pytest.fixture(scope="module", name="fake")(fake_on_a_port)


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake.port}",
                           request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw


def chat(**extra) -> dict:
    return {"model": MODEL, "messages": HISTORY, **extra}


def completion(**extra) -> dict:
    return {"model": MODEL, "prompt": "2+2=", **extra}


def replied(message: dict) -> dict:
    """A history whose assistant turn carries `message`'s keys, as a client that appends the
    answer object it received sends it."""
    return chat(messages=[*HISTORY, {"role": "assistant", "content": "4", **message},
                          {"role": "user", "content": "And 3+3?"}])


REFUSED = [  # (route, body, the param the 400 names)
    ("chat", chat(foo=1), "foo"),
    ("chat", chat(tool_choice="required"), "tool_choice"),
    ("chat", chat(tool_choice={"type": "function", "function": {"name": "add"}}),
     "tool_choice"),
    # inference-perf's agentic workload forces a call: never made here
    ("chat", chat(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "add"}}),
     "tool_choice"),
    ("chat", chat(tools=[TOOL], tool_choice="required"), "tool_choice"),
    ("chat", chat(tools="add"), "tools"),
    ("chat", chat(tools=[{"type": "web_search"}]), "tools[0]"),
    ("chat", chat(tools=[TOOL, {"type": "function", "function": {"name": 7}}]), "tools[1]"),
    ("chat", chat(tools=[TOOL] * 129), "tools"),
    ("chat", chat(functions=[TOOL["function"]]), "functions"),
    ("chat", chat(function_call="auto"), "function_call"),
    ("chat", chat(function_call={"name": "add"}), "function_call"),
    ("chat", chat(modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"}),
     "modalities"),
    ("chat", chat(audio={"voice": "alloy", "format": "wav"}), "audio"),
    ("chat", chat(top_logprobs=3), "top_logprobs"),  # without logprobs: true
    ("chat", chat(logprobs=True, top_logprobs=21), "top_logprobs"),
    ("chat", chat(logprobs=1), "logprobs"),  # a boolean in chat
    ("chat", chat(prediction={"type": "content", "content": "4"}), "prediction"),
    ("chat", chat(web_search_options={}), "web_search_options"),
    ("chat", chat(reasoning_effort="high"), "reasoning_effort"),
    ("chat", chat(verbosity="low"), "verbosity"),
    ("chat", chat(stream=True, stream_options={"include_usage": True,
                                               "continuous_usage_stats": "yes"}),
     "stream_options.continuous_usage_stats"),  # vLLM's: a boolean
    ("chat", chat(echo=True), "echo"),
    ("chat", chat(min_tokens=5, max_tokens=4), "min_tokens"),  # more than the answer may have
    ("chat", chat(min_tokens=-1), "min_tokens"),
    ("chat", chat(skip_special_tokens=False), "skip_special_tokens"),
    ("chat", chat(min_tokens=False), "min_tokens"),  # JSON false is not the number 0
    ("chat", chat(chat_template_kwargs=["enable_thinking"]), "chat_template_kwargs"),
    ("chat", chat(chat_template_kwargs={"messages": []}), "chat_template_kwargs.messages"),
    ("chat", chat(chat_template_kwargs={"tools": [TOOL]}), "chat_template_kwargs.tools"),
    ("chat", chat(chat_template_kwargs={"x": "y" * 17000}), "chat_template_kwargs"),
    ("chat", chat(stream=True, stream_options={"include_usage": True, "x": 1}),
     "stream_options.x"),
    ("chat", replied({"tool_calls": [CALL]}), "messages[1].tool_calls"),
    ("chat", replied({"function_call": {"name": "add", "arguments": "{}"}}),
     "messages[1].function_call"),
    ("chat", replied({"refusal": "I can't."}), "messages[1].refusal"),
    ("chat", chat(messages=[{"role": "user", "content": "hi", "name": 5}]), "messages[0].name"),
    ("chat", chat(messages=[{"role": "user", "content": "hi", "name": "a" * 257}]),
     "messages[0].name"),
    ("chat", chat(messages=[{"role": "user", "content": "hi", "name": "al\nice"}]),
     "messages[0].name"),
    ("chat", chat(messages=[{"role": "user", "content": "hi", "weight": 0}]),
     "messages[0].weight"),
    ("cmpl", completion(foo=1), "foo"),
    ("cmpl", completion(metadata={"a": "b"}), "metadata"),  # not a completions field
    ("cmpl", completion(continue_final_message=True), "continue_final_message"),
    ("cmpl", completion(tools=[TOOL]), "tools"),
    ("cmpl", completion(min_tokens=17), "min_tokens"),  # above completions' default of 16
    ("cmpl", completion(logprobs=21), "logprobs"),
    ("cmpl", completion(logprobs=True), "logprobs"),  # a number in completions
    ("cmpl", completion(top_logprobs=2), "top_logprobs"),  # not a completions field
]

ACCEPTED = [  # metadata, neutral values, and the project's own clients' bodies
    ("chat", chat(user="u1", metadata={"k": "v"}, store=False, service_tier="auto",
                  prompt_cache_key="p", safety_identifier="s")),
    ("chat", chat(store=True, parallel_tool_calls=True)),
    ("chat", chat(tool_choice="none", tools=[])),
    ("chat", chat(tool_choice="auto")),
    # Open WebUI sends its built-in tools with every turn (no tool_choice): answered in text
    ("chat", chat(tools=[TOOL] * 28)),
    ("chat", chat(tools=[TOOL], tool_choice="auto", parallel_tool_calls=False)),
    ("chat", chat(tools=[TOOL], tool_choice="none")),
    ("chat", chat(functions=[], function_call="none")),
    ("chat", chat(modalities=["text"], audio=None, prediction=None, web_search_options=None)),
    ("chat", chat(logprobs=False, top_logprobs=0, reasoning_effort=None, echo=False)),
    ("chat", chat(logprobs=True, top_logprobs=20)),
    ("chat", chat(verbosity="medium")),  # OpenAI's default: asks for nothing
    ("chat", chat(chat_template_kwargs={"enable_thinking": False})),  # vLLM's, for the template
    ("chat", chat(messages=[{"role": "system", "content": "Be brief.", "name": "setup"},
                            {"role": "user", "content": "hi", "name": "user"}])),  # AutoGen
    ("cmpl", completion(logprobs=0)),
    ("chat", chat(top_k=20, min_p=0, repetition_penalty=1, ignore_eos=True,
                  skip_special_tokens=True, spaces_between_special_tokens=True,
                  include_stop_str_in_output=False, min_tokens=0, stop_token_ids=[])),
    ("chat", chat(stream=True, stream_options={"include_usage": True,
                                               "include_obfuscation": False,
                                               "continuous_usage_stats": False})),
    ("cmpl", completion(stream=True, stream_options={"include_usage": True,
                                                     "continuous_usage_stats": True})),
    ("chat", chat(messages=[{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": "hello", "refusal": None, "tool_calls": None,
        "function_call": None, "audio": None, "annotations": [], "name": None,
        "reasoning_content": None}, {"role": "user", "content": "bye"}])),
    ("chat", chat(messages=[{"role": "user", "content": "x"}, {"role": "assistant",
                                                               "content": "y"}],
                  continue_final_message=True, add_generation_prompt=False)),
    ("chat", {"messages": HISTORY, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
              "stream": True, "stream_options": {"include_usage": True}}),  # bench/load
    ("cmpl", completion(max_tokens=4, temperature=0, ignore_eos=True, stream=True,
                        stream_options={"include_usage": True})),  # bench sessions
    ("cmpl", completion(echo=False, suffix=None, best_of=1, logprobs=None, n=1, seed=3,
                        user="u", top_k=5, min_p=0, repetition_penalty=1,
                        skip_special_tokens=True)),
]


def _path(route: str) -> str:
    return "/v1/chat/completions" if route == "chat" else "/v1/completions"


def served(gw, path: str, body: dict) -> tuple[int, bytes]:
    """Status and raw body (an SSE stream is not one JSON document)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


@pytest.mark.parametrize("route, body, param", REFUSED,
                         ids=[f"{r}-{p}" for r, _, p in REFUSED])
def test_a_field_that_would_be_ignored_is_a_400_naming_it(gateway, fake, route, body, param):
    sent = len(fake.requests)
    status, _, reply = post(gateway, _path(route), body)
    assert_error(status, reply, 400)
    assert reply["error"]["param"] == param, reply
    assert reply["error"]["type"] == "invalid_request_error"
    assert len(fake.requests) == sent


@pytest.mark.parametrize("route, body", ACCEPTED, ids=[f"{r}-{i}" for i, (r, _) in
                                                       enumerate(ACCEPTED)])
def test_metadata_and_neutral_values_are_accepted(gateway, fake, route, body):
    sent = len(fake.requests)
    status, data = served(gateway, _path(route), body)
    assert status == 200, data
    assert b"echo:" in data  # the answer itself, streamed or not
    assert len(fake.requests) == sent + 1


def test_an_unknown_field_is_refused_in_openais_words(gateway):
    status, _, reply = post(gateway, "/v1/chat/completions", chat(foo="bar"))
    assert_error(status, reply, 400, "Unrecognized request argument supplied: foo")
    assert reply["error"]["code"] == "unknown_parameter"
    status, _, reply = post(gateway, "/v1/chat/completions", chat(tool_choice="required"))
    assert_error(status, reply, 400, "never calls a tool")
    assert reply["error"]["code"] == "unsupported_parameter"
