"""SGLang's multi-turn benchmark client, written as bench_multiturn.py is (the whole history as
one text, POST /generate streamed, history += generated text + next question, no session id),
through the live deployment with the real model, greedy: it reuses KV as well as the same client
sending X-Session-Id, and its answers equal a recompute of the history."""
from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit

from tests.test_conversations_e2e import client
from tests.test_conversations_raw_e2e import FIRST, NEXT, complete


def generate(url: str, text: str, session: str | None = None, stream: bool = True,
             max_new_tokens: int = 8) -> tuple[str, dict, dict]:
    """(generated text, meta_info, response headers), read as bench_multiturn reads them."""
    body = {"text": text, "sampling_params": {"temperature": 0.0,
                                              "max_new_tokens": max_new_tokens,
                                              "ignore_eos": True},
            "stream": stream, "lora_path": "", "return_logprob": False, "logprob_start_len": -1}
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    conn.request("POST", "/generate", json.dumps(body), {
        "Content-Type": "application/json", **({"X-Session-Id": session} if session else {})})
    reply = conn.getresponse()
    data = reply.read().decode()
    conn.close()
    assert reply.status == 200, data
    if not stream:
        got = json.loads(data)
        return got["text"], got["meta_info"], dict(reply.getheaders())
    generated, meta = "", {}
    for line in data.splitlines():
        line = line.strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[len("data:"):])
        generated, meta = chunk["text"], chunk["meta_info"]  # cumulative: keep the last
    return generated, meta, dict(reply.getheaders())


def bench_multiturn_client(url: str, first: str, session: str | None, rounds: int = 4):
    history, turns = first, []
    for r in range(rounds):
        turns.append(generate(url, history, session))
        history += turns[-1][0]
        if r < rounds - 1:
            history += NEXT[r]
    return turns, history


def test_bench_multiturn_client_reuses_kv_as_with_a_session_id(deployment):
    url = deployment.gateway_url
    tag = uuid.uuid4().hex[:6]
    plain, history = bench_multiturn_client(url, f"[{tag}] " + FIRST, None)
    named, _ = bench_multiturn_client(url, f"[{tag}] " + FIRST, f"native-named-{tag}")
    assert [t[0] for t in plain] == [t[0] for t in named]
    assert all(t[0] and t[1]["completion_tokens"] == 8 for t in plain)
    assert all(t[1]["finish_reason"]["type"] == "length" for t in plain)
    assert [t[2]["x-bidaw-session-recognised"] for t in plain] == [
        "new", "content", "content", "content"]
    assert plain[0][1]["cached_tokens"] == 0
    # the named session, holding no KV yet, read its first prompt from the plain one's
    assert named[0][1]["cached_tokens"] == named[0][1]["prompt_tokens"] - 1
    for by_id, by_content in zip(named[1:], plain[1:]):
        assert by_id[1]["cached_tokens"] > 0
        assert abs(by_content[1]["cached_tokens"] - by_id[1]["cached_tokens"]) <= 8
        assert by_content[1]["cached_tokens"] < by_content[1]["prompt_tokens"]
    # the last answer equals a greedy recompute of its history (a fresh session whose
    # cache_salt reads no other's KV: /v1/completions, as /generate has no salt)
    last_prompt = history[:len(history) - len(plain[-1][0])]
    text, usage, _, _ = complete(client(url), last_prompt, f"recompute-{uuid.uuid4().hex}",
                                 salt=uuid.uuid4().hex)
    assert usage.prompt_tokens_details.cached_tokens == 0 and text == plain[-1][0]
    assert usage.prompt_tokens == plain[-1][1]["prompt_tokens"]


def test_max_new_tokens_0_computes_the_prompt_and_answers_nothing_as_sglang_does(deployment):
    """SGLang's bench_serving draws output lengths from 0 (its default --random-range-ratio):
    SGLang answers such a request with no text; it was a 400 here."""
    url = deployment.gateway_url
    prompt = f"[{uuid.uuid4().hex[:6]}] " + FIRST
    for stream in (False, True):
        text, meta, _ = generate(url, prompt, stream=stream, max_new_tokens=0)
        assert text == "" and meta["completion_tokens"] == 0
        assert meta["finish_reason"] == {"type": "length", "length": 0}
        assert meta["prompt_tokens"] > 10
    # its prompt's KV was kept: the same text again reads it
    _, meta, _ = generate(url, prompt, stream=False, max_new_tokens=4)
    assert meta["cached_tokens"] == meta["prompt_tokens"] - 1
