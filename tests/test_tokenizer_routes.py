"""vLLM's /tokenize, /detokenize and /tokenizer_info through the live deployment (gateway ->
scheduler -> the worker's own tokenizer): the ids are those the turn of the same prompt counts,
round trips keep the text, the chat template renders what the server tokenizes, and bad input
is a 400 naming its field."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

from services.gateway.config import GatewayConfig
from tests.background_gateway import BackgroundGateway
from tests.cluster import ServiceProcess

TEXTS = ["Hello, world!", "Crème brûlée à la façon de Noël", "東京は日本の首都です。",
         "Emoji: 🎉🚀 and 👩‍👩‍👧 family", "  leading spaces\nand\ttabs  "]
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Héllo 世界 🎉"}]


def call(dep, method: str, path: str, body=None) -> tuple[int, dict]:
    where = urlsplit(dep.gateway_url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body)
    conn.request(method, path, data, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    status, raw = reply.status, reply.read()
    conn.close()
    return status, json.loads(raw)


def tokenize(dep, **body) -> dict:
    status, reply = call(dep, "POST", "/tokenize", body)
    assert status == 200, reply
    return reply


def test_tokenize_counts_what_the_turn_counts(deployment):
    prompt = "The capital of France is"
    raw = tokenize(deployment, prompt=prompt, model="smollm2-135m")
    assert raw["count"] == len(raw["tokens"]) and raw["max_model_len"] == 8192
    status, done = call(deployment, "POST", "/v1/completions",
                        {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert status == 200 and done["usage"]["prompt_tokens"] == raw["count"]
    # lm-eval's RemoteTokenizer sends add_special_tokens false: SmolLM2 adds no BOS either way
    assert tokenize(deployment, prompt=prompt, add_special_tokens=False)["tokens"] == \
        raw["tokens"]
    chat = tokenize(deployment, messages=CHAT)
    status, done = call(deployment, "POST", "/v1/chat/completions",
                        {"messages": CHAT, "max_tokens": 1, "temperature": 0})
    assert status == 200 and done["usage"]["prompt_tokens"] == chat["count"]
    closed = tokenize(deployment, messages=CHAT, add_generation_prompt=False)
    assert closed["count"] < chat["count"] and chat["tokens"][:closed["count"]] == \
        closed["tokens"]


def test_detokenize_inverts_tokenize(deployment):
    for text in TEXTS:
        ids = tokenize(deployment, prompt=text, add_special_tokens=False)["tokens"]
        status, back = call(deployment, "POST", "/detokenize", {"tokens": ids})
        assert status == 200 and back == {"prompt": text}
    # ids that split a character (the 4 bytes of one emoji) decode to U+FFFD, as vLLM does
    ids = tokenize(deployment, prompt="🎉", add_special_tokens=False)["tokens"]
    assert len(ids) > 1
    status, part = call(deployment, "POST", "/detokenize", {"tokens": ids[:1]})
    assert status == 200 and part["prompt"] and set(part["prompt"]) == {"\ufffd"}
    assert call(deployment, "POST", "/detokenize", {"tokens": []}) == (200, {"prompt": ""})


def test_tokenizer_info_carries_the_template_that_renders_the_servers_prompt(deployment):
    status, info = call(deployment, "GET", "/tokenizer_info")
    assert status == 200, info
    assert info["eos_token"] == "<|im_end|>" and info["bos_token"] == "<|im_start|>"
    assert info["pad_token"] == "<|im_end|>" and info["model_max_length"] == 8192
    eos = tokenize(deployment, prompt=info["eos_token"], add_special_tokens=False)["tokens"]
    assert len(eos) == 1  # a special token is one id (RemoteTokenizer.eos_token_id)
    jinja2 = pytest.importorskip("jinja2.sandbox")
    env = jinja2.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(info["chat_template"]).render(messages=CHAT,
                                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")
    assert tokenize(deployment, prompt=text, add_special_tokens=False)["tokens"] == \
        tokenize(deployment, messages=CHAT)["tokens"]


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": 5}, "prompt"),
    ("/tokenize", {"prompt": ["a"]}, "prompt"),
    ("/tokenize", {"prompt": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/tokenize", {"prompt": "a", "bogus": 1}, "bogus"),
    ("/tokenize", {"prompt": "a", "return_token_strs": True}, "return_token_strs"),
    ("/tokenize", {"messages": []}, "messages"),
    ("/tokenize", {"messages": "hi"}, "messages"),
    ("/tokenize", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("/tokenize", {"messages": [{"role": "user", "content": {"a": 1}}]},
     "messages[0].content"),
    ("/tokenize", {"messages": [{"role": "user", "content": "x", "name": ["bob"]}]},
     "messages[0].name"),
    ("/tokenize", {"messages": [{"role": "user", "content": ""}]}, "messages"),
    ("/detokenize", {}, "tokens"),
    ("/detokenize", {"tokens": "1 2"}, "tokens"),
    ("/detokenize", {"tokens": [1, [2]]}, "tokens"),
    ("/detokenize", {"tokens": [1, True]}, "tokens"),
    ("/detokenize", {"tokens": [1.5]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": [49152]}, "tokens"),
    ("/detokenize", {"tokens": [2**32 + 5]}, "tokens"),
    ("/detokenize", {"tokens": [2**70]}, "tokens[0]"),  # refused as the body is read
])
def test_bad_input_is_a_400_naming_the_field(deployment, path, body, param):
    status, reply = call(deployment, "POST", path, body)
    assert status == 400 and reply["error"]["param"] == param, reply


def test_bodies_that_are_not_json_objects_or_not_utf8_are_400s(deployment):
    for path in ("/tokenize", "/detokenize"):
        for raw in (b'{"prompt": "\xff\xfe"}', b"[1, 2]", b"{nope", b'"text"'):
            status, reply = call(deployment, "POST", path, raw)
            assert status == 400 and "error" in reply, (path, raw, reply)
    status, reply = call(deployment, "POST", "/tokenize", {"model": "gpt-9", "prompt": "a"})
    assert status == 404 and reply["error"]["param"] == "model"


def test_with_no_worker_the_routes_answer_503_with_retry_after(tmp_path):
    """A scheduler whose workers have not registered (yet): the gateway's 503, as for turns."""
    scheduler = ServiceProcess("scheduler", tmp_path, "--store", "", "--workers", "",
                               "--heartbeat-s", "0.2").wait()
    try:
        config = GatewayConfig(listen="127.0.0.1:0", scheduler=scheduler.target,
                               request_timeout_s=30)
        with BackgroundGateway(config) as gw:
            for method, path, body in (("POST", "/tokenize", {"prompt": "hi"}),
                                       ("POST", "/detokenize", {"tokens": [1, 2]}),
                                       ("GET", "/tokenizer_info", None)):
                conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
                conn.request(method, path, None if body is None else json.dumps(body),
                             {"Content-Type": "application/json"})
                reply = conn.getresponse()
                payload = json.loads(reply.read())
                conn.close()
                assert reply.status == 503 and reply.getheader("Retry-After"), payload
                assert payload["error"]["message"], payload
    finally:
        scheduler.stop()
