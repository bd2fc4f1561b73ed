"""OpenAI's participant `name` on messages (AutoGen sends its agents' names on every message; it
got a 400 on every request): given to the model's chat template, as vLLM does. SmolLM2's template
does not show names, so a named conversation answers as the same one without names, and its next
turn, names and all, reuses its history."""
from __future__ import annotations

import uuid

import openai

from compute_worker.prompt import template_messages
from services.runtime.gen import common_pb2

MODEL = "smollm2-135m"


def test_the_template_gets_a_name_only_where_one_was_given():
    turn = common_pb2.TurnRequest(messages=[
        common_pb2.ChatMessage(role="system", content="Be brief."),
        common_pb2.ChatMessage(role="user", content="Hi", name="alice")])
    assert template_messages(turn) == [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Hi", "name": "alice"}]


def test_a_named_conversation_answers_as_without_names_and_reuses_its_history(deployment):
    client = openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                           timeout=300)
    salt = uuid.uuid4().hex

    def ask(messages, named: bool, salted: str):
        shown = [dict(m, name=n) if named and n else dict(m) for m, n in messages]
        return client.chat.completions.with_raw_response.create(
            model=MODEL, messages=shown, max_tokens=12, temperature=0,
            extra_body={"cache_salt": salted})

    history = [({"role": "system", "content": "You are a helpful assistant."}, ""),
               ({"role": "user", "content": f"[{salt[:8]}] Name a river in Europe."}, "user")]
    first = ask(history, True, salt)
    plain = ask(history, False, uuid.uuid4().hex).parse()
    answer = first.parse().choices[0].message.content
    assert answer == plain.choices[0].message.content  # the template shows no names
    history += [({"role": "assistant", "content": answer}, "helper"),
                ({"role": "user", "content": "And one in Asia?"}, "user")]
    second = ask(history, True, salt)
    usage, first_usage = second.parse().usage, first.parse().usage
    assert second.headers["x-bidaw-session-recognised"] == "content"
    assert usage.prompt_tokens_details.cached_tokens >= \
        first_usage.prompt_tokens + first_usage.completion_tokens - 1
    assert second.parse().choices[0].message.content == \
        ask(history, False, uuid.uuid4().hex).parse().choices[0].message.content
