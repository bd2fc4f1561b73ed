"""vLLM's chat_template_kwargs (apps for Qwen-style models send {"enable_thinking": false}; it was
a 400): the variables reach the chat template, which reads them or not, in a turn's prompt, in
the respelt history after its answer and in /tokenize alike."""
from __future__ import annotations

import json
import urllib.request
import uuid

import openai
import pytest

from compute_worker.prompt import TurnError, chat_ids
from compute_worker.respell import history_ids
from compute_worker.tokenizer import ChatTokenizer
from services.runtime.gen import common_pb2

MODEL = "smollm2-135m"
SHOUTING = ("{% for m in messages %}{{ m.role }}: {{ m.content }}{{ '!' if shout else '' }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def _turn(kwargs: dict | None = None, **fields) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(
        messages=[common_pb2.ChatMessage(role="user", content="Hello there")],
        chat_template_kwargs=json.dumps(kwargs) if kwargs is not None else "", **fields)


def test_a_template_that_reads_a_variable_renders_it_in_prompt_and_history(smollm):
    _, tok = smollm
    shouting = ChatTokenizer(tok.tokenizer, SHOUTING, bos_token_id=tok.bos_token_id,
                             eos_token_ids=tok.eos_token_ids)
    plain, loud = chat_ids(_turn(), shouting), chat_ids(_turn({"shout": True}), shouting)
    assert shouting.decode(plain) == "user: Hello there\nassistant:"
    assert shouting.decode(loud) == "user: Hello there!\nassistant:"
    # the history the next turn sends, with the same variables: the answer's message shouts too
    after = history_ids(_turn({"shout": True}), shouting, loud, " Hi")
    assert shouting.decode(after) == "user: Hello there!\nassistant:  Hi!\n"


@pytest.mark.parametrize("bad", ['["shout"]', "{", '{"messages": []}', '{"bos_token": "x"}',
                                 '{"raise_exception": 1}'])  # would hide the template's own
def test_the_worker_refuses_what_is_no_object_or_sets_the_servers_variables(smollm, bad):
    _, tok = smollm
    with pytest.raises(TurnError, match="chat_template_kwargs"):
        chat_ids(common_pb2.TurnRequest(messages=[common_pb2.ChatMessage(
            role="user", content="x")], chat_template_kwargs=bad), tok)


def test_smollm2s_template_reads_none_so_the_answer_and_tokens_are_unchanged(deployment):
    client = openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                           timeout=300)
    messages = [{"role": "user", "content": f"[{uuid.uuid4().hex[:8]}] Name a colour."}]

    def ask(**extra):
        return client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=10, temperature=0,
            extra_body={"cache_salt": uuid.uuid4().hex, **extra})

    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    with_kwargs, without = ask(**kwargs), ask()
    assert with_kwargs.choices[0].message.content == without.choices[0].message.content
    assert with_kwargs.usage.prompt_tokens == without.usage.prompt_tokens

    def tokens(**extra) -> list[int]:
        body = json.dumps({"model": MODEL, "messages": messages, **extra}).encode()
        url = deployment.gateway_url.rsplit("/v1", 1)[0] + "/tokenize"
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.load(reply)["tokens"]

    assert tokens(**kwargs) == tokens() and len(tokens()) == without.usage.prompt_tokens
