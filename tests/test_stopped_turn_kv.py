"""A chat UI's Stop (aiperf's request cancellation; Open WebUI's stop button): the client hangs up
once its answer has begun, then sends its next turn, with the partial answer in the history or
without it. The stopped turn's prompt KV was computed: it is kept, in whole blocks, and the next
turn reuses it (it used to be dropped: 0 of 435 prompt tokens cached), with the answer a
recompute of the same history gives."""
from __future__ import annotations

import http.client
import json
import time
import uuid

import openai
import pytest

from compute_worker.models.kv_blocks import BLOCK

MODEL = "smollm2-135m"
TOPIC = " ".join(f"Fact {i}: the {i}th lighthouse on the coast is painted {c}." for i, c in
                 zip(range(1, 25), ["red", "white", "blue", "green"] * 6))


def _stopped_turn(deployment, messages: list, salt: str) -> tuple[str, int]:
    """Stream a turn and hang up at its first text; (that text, the prompt's tokens)."""
    host, port = deployment.gateway_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": MODEL, "messages": messages, "max_tokens": 400, "ignore_eos": True,
        "temperature": 0, "stream": True, "cache_salt": salt,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}),
        {"Content-Type": "application/json"})
    reply = conn.getresponse()
    assert reply.status == 200
    while line := reply.readline():
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            text = chunk["choices"][0]["delta"].get("content")
            if text:
                conn.sock.close()  # Stop
                conn.close()
                return text, chunk["usage"]["prompt_tokens"]
    raise AssertionError("the stream ended before any text")


@pytest.mark.parametrize("keeps_partial", [True, False])
def test_the_next_turn_reuses_a_stopped_turns_prompt_kv(deployment, keeps_partial):
    client = openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                           timeout=300)
    salt = uuid.uuid4().hex  # no other test's KV
    messages = [{"role": "user", "content": f"[{salt[:8]}] {TOPIC} Which lighthouses are red?"}]
    partial, prompt_tokens = _stopped_turn(deployment, messages, salt)
    assert prompt_tokens > 3 * BLOCK
    time.sleep(1.0)  # the worker saves the kept KV once the engine lets the turn go
    follow = messages + ([{"role": "assistant", "content": partial}] if keeps_partial else [])
    follow += [{"role": "user", "content": "Answer in one word."}]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=follow, max_tokens=10, temperature=0, extra_body={
            "cache_salt": salt})
    reply = raw.parse()
    assert raw.headers["x-bidaw-session-recognised"] == "content"  # the stopped turn's session
    assert reply.usage.prompt_tokens_details.cached_tokens >= prompt_tokens - BLOCK
    recomputed = client.chat.completions.create(
        model=MODEL, messages=follow, max_tokens=10, temperature=0,
        extra_body={"cache_salt": uuid.uuid4().hex})
    assert recomputed.usage.prompt_tokens_details.cached_tokens == 0
    assert reply.choices[0].message.content == recomputed.choices[0].message.content
