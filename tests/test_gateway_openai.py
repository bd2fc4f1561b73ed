"""The `openai` package against the live embedded deployment (real model, real KV store)."""
from __future__ import annotations

import openai
import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig

MODEL = "smollm2-135m"


def client(base_url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)


def test_non_streaming_turns_reuse_stored_kv(deployment):
    c = client(deployment.gateway_url)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    usages = []
    for follow_up in ("And of Italy?", "Thanks."):
        reply = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=12,
                                          temperature=0, user="openai-plain")
        answer = reply.choices[0].message.content
        assert answer and reply.choices[0].finish_reason in ("stop", "length")
        usages.append(reply.usage)
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": follow_up}]
    reply = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=12,
                                      temperature=0, user="openai-plain")
    usages.append(reply.usage)
    assert usages[0].prompt_tokens_details.cached_tokens == 0
    for before, after in zip(usages, usages[1:]):
        # everything the previous turn stored (its prompt and all but the last answer token)
        assert after.prompt_tokens_details.cached_tokens > 0
        assert after.prompt_tokens > before.prompt_tokens + before.completion_tokens - 1
    assert all(u.completion_tokens <= 12 for u in usages)


def test_streaming_turns_report_cached_tokens(deployment):
    c = client(deployment.gateway_url)
    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Name a colour."}]
    cached = []
    for follow_up in ("Another one?", None):
        chunks = list(c.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=8, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_headers={"X-Session-Id": "openai-sse"}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        assert text and chunks[-1].usage is not None
        cached.append(chunks[-1].usage.prompt_tokens_details.cached_tokens)
        if follow_up:
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": follow_up}]
    assert cached[0] == 0 and cached[1] > 0


def test_edited_history_reuses_only_the_matching_prefix(deployment):
    c = client(deployment.gateway_url)
    first = [{"role": "user", "content": "Tell me a fact about the Moon."}]
    reply = c.chat.completions.create(model=MODEL, messages=first, max_tokens=10,
                                      temperature=0, user="openai-edit")
    history = first + [{"role": "assistant", "content": reply.choices[0].message.content},
                       {"role": "user", "content": "Another?"}]
    same = c.chat.completions.create(model=MODEL, messages=history, max_tokens=4,
                                     temperature=0, user="openai-edit")
    edited = [{"role": "user", "content": "Tell me a fact about Mars."}] + history[1:]
    changed = c.chat.completions.create(model=MODEL, messages=edited, max_tokens=4,
                                        temperature=0, user="openai-edit")
    assert same.usage.prompt_tokens_details.cached_tokens >= reply.usage.prompt_tokens
    # the edit sits inside the first user message: only the template before it can match
    assert 0 <= changed.usage.prompt_tokens_details.cached_tokens < reply.usage.prompt_tokens


def test_completions_and_models_on_the_live_gateway(deployment):
    c = client(deployment.gateway_url)
    assert [m.id for m in c.models.list().data] == [MODEL, "HuggingFaceTB/SmolLM2-135M-Instruct"]
    reply = c.completions.create(model=MODEL, prompt="Say hello.", max_tokens=5, temperature=0)
    assert reply.choices[0].text and reply.usage.completion_tokens <= 5


@pytest.fixture(scope="module")
def keyed_gateway(deployment):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=deployment.scheduler_target,
                           api_keys="alice:key-alice-123,bob:key-bob-456")
    with BackgroundGateway(config) as gw:
        yield gw


def test_tenants_cannot_continue_each_others_sessions(keyed_gateway):
    alice, bob = (client(keyed_gateway.url, k) for k in ("key-alice-123", "key-bob-456"))
    messages = [{"role": "user", "content": "My secret word is heliotrope. Remember it."}]
    first = alice.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                          temperature=0, user="shared-id")
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "What is my secret word?"}]
    # Bob sends her exact history and her user id: he reaches a session of his own, empty.
    stolen = bob.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                         temperature=0, user="shared-id")
    assert stolen.usage.prompt_tokens_details.cached_tokens == 0
    own = alice.chat.completions.create(model=MODEL, messages=messages, max_tokens=4,
                                        temperature=0, user="shared-id")
    assert own.usage.prompt_tokens_details.cached_tokens > 0


def test_api_keys_are_required(keyed_gateway):
    with pytest.raises(openai.AuthenticationError) as err:
        client(keyed_gateway.url, "wrong-key").models.list()
    assert err.value.status_code == 401
    assert err.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(keyed_gateway.url, "key-alice-12").chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert client(keyed_gateway.url, "key-bob-456").models.list().data[0].id == MODEL


def test_two_conversations_of_one_user_each_keep_their_kv(deployment):
    """OpenAI's `user` is the end user, who may hold several conversations (two tabs of a chat
    app). It used to name the session: the two conversations then overwrote each other's KV at
    every turn and each turn reused only the system prompt (21 of 114 tokens)."""
    c = client(deployment.gateway_url)
    system = {"role": "system", "content": "You are a helpful assistant (two tabs)."}
    tabs = [[system, {"role": "user", "content": "Name a fruit and say why it is healthy."}],
            [system, {"role": "user", "content": "Name a city and say why people visit it."}]]
    usages = {0: [], 1: []}
    for follow_up in ("Tell me more.", "And one more thing?", None):
        for i, messages in enumerate(tabs):
            raw = c.chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, max_tokens=16, temperature=0, user="one-user")
            reply = raw.parse()
            usages[i].append((reply.usage, raw.headers["x-bidaw-session-recognised"]))
            if follow_up:
                messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                             {"role": "user", "content": follow_up}]
    for turns in usages.values():
        assert [how for _, how in turns[1:]] == ["content", "content"]
        for (before, _), (after, _) in zip(turns, turns[1:]):  # the whole previous turn
            assert after.prompt_tokens_details.cached_tokens >= \
                before.prompt_tokens + before.completion_tokens - 1


def test_tools_are_accepted_and_the_answer_is_text(deployment):
    """Open WebUI sends its built-in tools with every chat turn (no tool_choice): every turn
    was a 400. The tools are left unused: the answer is the one without them, in text."""
    c = client(deployment.gateway_url)
    tool = {"type": "function", "function": {
        "name": "get_current_timestamp", "description": "Now, as an ISO timestamp.",
        "parameters": {"type": "object", "properties": {}}}}
    messages = [{"role": "user", "content": "Name a colour (tools)."}]
    with_tools = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                           temperature=0, tools=[tool] * 3)
    plain = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8,
                                      temperature=0)
    choice = with_tools.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert choice.message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError) as refused:
        c.chat.completions.create(model=MODEL, messages=messages, max_tokens=8, tools=[tool],
                                  tool_choice="required")
    assert refused.value.body["param"] == "tool_choice"
