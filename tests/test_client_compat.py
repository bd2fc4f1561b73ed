"""Third-party clients read the answers as they read SGLang's and OpenAI's, through the live
deployment with the real model: SGLang's bench_serving (native backend) takes each streamed
chunk's meta_info.completion_tokens, and clients tell a prompt past the context from other bad
requests by OpenAI's words ("This model's maximum context length is ...", as vLLM says too) or
its code `context_length_exceeded` (LiteLLM's ContextWindowExceededError, trimming retries)."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest

CONTEXT = 8192
OPENING = f"This model's maximum context length is {CONTEXT} tokens. However,"


def post(url: str, path: str, body: dict) -> tuple[int, str]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=300)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    reply = conn.getresponse()
    data = reply.read().decode()
    conn.close()
    return reply.status, data


def bench_serving_read(data: str) -> tuple[str, int, list[int]]:
    """async_request_sglang_generate's loop (sglang/bench_serving.py, native backend): for
    each chunk with text, output_len = data["meta_info"]["completion_tokens"]; the decoding
    chunks' token counts give its inter-token latencies. (text, output_len, per-chunk counts)"""
    generated, output_len, counts = "", 0, []
    for line in data.splitlines():
        chunk = line.strip().removeprefix("data: ")
        if not line.strip() or chunk == "[DONE]":
            continue
        chunk = json.loads(chunk)
        if "text" in chunk and chunk["text"]:
            generated = chunk["text"]
            output_len = chunk["meta_info"]["completion_tokens"]  # a KeyError fails the request
            counts.append(output_len)
    return generated, output_len, counts


def test_every_generate_chunk_carries_completion_tokens_as_bench_serving_reads(deployment):
    body = {"text": "The capital of France is", "stream": True, "lora_path": None,
            "return_logprob": False, "logprob_start_len": -1,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}}
    status, data = post(deployment.gateway_url, "/generate", body)
    assert status == 200, data
    text, output_len, counts = bench_serving_read(data)
    assert output_len == 6 and text
    assert counts == sorted(counts) and 1 <= counts[0] and len(counts) >= 2
    # the itl list bench_serving builds holds one gap per token after the first chunk's
    assert sum(b - a for a, b in zip(counts, counts[1:])) == 6 - counts[0]
    # the same answer unstreamed
    status, whole = post(deployment.gateway_url, "/generate", {**body, "stream": False})
    assert status == 200, whole
    meta = json.loads(whole)["meta_info"]
    assert json.loads(whole)["text"] == text and meta["completion_tokens"] == 6


@pytest.mark.parametrize("path, body, param", [
    # token ids: the worker's cheap count
    ("/v1/completions", {"prompt": [100] * CONTEXT, "max_tokens": 4}, None),
    # text the worker tokenises: 9,000 words, within the gateway's byte bound; streamed
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello " * 9000}],
                              "max_tokens": 4, "stream": True}, None),
    # SGLang's native route, token ids
    ("/generate", {"input_ids": [100] * (CONTEXT + 5)}, None),
    # past the gateway's byte bound (8192 x 81 bytes): refused before the scheduler
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 700_000}]},
     "messages"),
    ("/v1/completions", {"prompt": "x" * 700_000}, "prompt"),
])
def test_a_prompt_past_the_context_is_openais_context_length_exceeded(deployment, path, body,
                                                                       param):
    status, data = post(deployment.gateway_url, path, {"model": "smollm2-135m", **body}
                        if path != "/generate" else body)
    assert status == 400, data
    error = json.loads(data)["error"]
    assert error["code"] == "context_length_exceeded", error
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith(OPENING), error
    assert error["param"] == param


def test_the_token_count_in_the_message_is_vllms(deployment):
    status, data = post(deployment.gateway_url, "/v1/completions",
                        {"prompt": [100] * 9000, "max_tokens": 4})
    assert status == 400, data
    message = json.loads(data)["error"]["message"]
    assert message == (f"{OPENING} you requested 9001 tokens (9000 in the prompt, 1 in the "
                       "completion). Please reduce the length of the prompt.")
