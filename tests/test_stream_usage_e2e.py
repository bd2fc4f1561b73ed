"""What guidellm (0.8, unchanged) asks of a live deployment: usage in every streamed chunk
(vLLM's continuous_usage_stats; SGLang's per-chunk meta_info), vLLM's stop / ignore_eos /
min_tokens on the Responses API, and a client that closes as soon as the answer has ended
(guidellm stops at the finish chunk or at `response.completed`): an answered turn, never a
499 or a cancelled turn, and its stored response kept."""
from __future__ import annotations

import http.client
import json
import time
import uuid

from tests.test_metrics import _count, scrape

MODEL = "smollm2-135m"


def _post(deployment, path: str, body: dict, headers: dict | None = None):
    host, port = deployment.gateway_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    conn.request("POST", path, json.dumps({"model": MODEL, **body}),
                 {"Content-Type": "application/json", **(headers or {})})
    reply = conn.getresponse()
    assert reply.status == 200, reply.read()[:300]
    return conn, reply


def _events(reply):
    """Each SSE `data:` payload as it comes ([DONE] as the string)."""
    while line := reply.readline():
        if line.startswith(b"data: "):
            data = line[6:].strip().decode()
            yield data if data == "[DONE]" else json.loads(data)


def _chat(deployment, messages: list, session: str, **options) -> list:
    body = {"messages": messages, "max_tokens": 12, "temperature": 0, "stream": True,
            **options}
    conn, reply = _post(deployment, "/v1/chat/completions", body, {"X-Session-Id": session})
    try:
        return list(_events(reply))
    finally:
        conn.close()


def test_continuous_usage_stats_put_the_usage_so_far_in_every_chunk(deployment):
    session = f"live-usage-{uuid.uuid4().hex}"
    options = {"stream_options": {"include_usage": True, "continuous_usage_stats": True},
               "cache_salt": session}  # no other test's KV
    messages = [{"role": "user", "content": "Name three colours."}]
    for turn in range(2):  # the second reads the first's KV: cached tokens in every chunk
        events = _chat(deployment, messages, session, **options)
        assert events[-1] == "[DONE]"
        *chunks, final = events[:-1]
        assert final["choices"] == [] and chunks and all("usage" in c for c in chunks)
        whole = final["usage"]
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert chunks[0]["usage"]["completion_tokens"] == 0
        done = [c["usage"]["completion_tokens"] for c in chunks]
        assert done == sorted(done) and done[-1] == whole["completion_tokens"] > 0
        for c in chunks:
            u = c["usage"]
            assert u["prompt_tokens"] == whole["prompt_tokens"]
            assert u["prompt_tokens_details"] == whole["prompt_tokens_details"]
            assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
        assert (whole["prompt_tokens_details"]["cached_tokens"] > 0) == (turn == 1)
        answer = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        messages += [{"role": "assistant", "content": answer},
                     {"role": "user", "content": "And three more?"}]


def test_continuous_usage_stats_without_include_usage_asks_for_nothing(deployment):
    events = _chat(deployment, [{"role": "user", "content": "Say hi."}],
                   f"live-usage-{uuid.uuid4().hex}",
                   stream_options={"continuous_usage_stats": True})
    assert events[-1] == "[DONE]" and not any("usage" in e for e in events[:-1])


def test_completions_and_generate_streams_count_as_they_go(deployment):
    conn, reply = _post(deployment, "/v1/completions", {
        "prompt": "One, two, three,", "max_tokens": 6, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    *chunks, final, end = list(_events(reply))
    conn.close()
    assert end == "[DONE]" and final["usage"]["completion_tokens"] == 6
    assert [c["usage"]["prompt_tokens"] for c in chunks] == [final["usage"]["prompt_tokens"]] * \
        len(chunks)
    assert chunks[-1]["usage"]["completion_tokens"] == 6

    conn, reply = _post(deployment, "/generate", {
        "text": "Four, five, six,", "stream": True,
        "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}})
    *chunks, end = list(_events(reply))
    conn.close()
    last = chunks[-1]["meta_info"]
    assert end == "[DONE]" and last["completion_tokens"] == 5
    for c in chunks:  # SGLang's meta_info: the prompt's counts from the first chunk on
        meta = c["meta_info"]
        assert (meta["prompt_tokens"], meta["cached_tokens"]) == (last["prompt_tokens"],
                                                                  last["cached_tokens"])


def test_responses_take_vllms_stop_ignore_eos_and_min_tokens(deployment):
    tag = uuid.uuid4().hex[:8]  # one prompt: greedy answers that differ only by the options

    def create(**body):
        conn, reply = _post(deployment, "/v1/responses", {
            "input": f"[{tag}] Count from one to twenty, in words.",
            "temperature": 0, "store": False, **body})
        try:
            return json.loads(reply.read())
        finally:
            conn.close()

    exact = create(max_output_tokens=8, ignore_eos=True, stop=None)
    assert exact["usage"]["output_tokens"] == 8 and exact["status"] == "incomplete"
    free = create(max_output_tokens=40, ignore_eos=True)  # 40 tokens: words enough
    text = free["output"][0]["content"][0]["text"]
    word = text.split()[2]  # a stop string from the answer's own text
    cut = create(max_output_tokens=40, ignore_eos=True, stop=[word])
    assert cut["output"][0]["content"][0]["text"] == text[:text.index(word)]
    assert cut["usage"]["output_tokens"] < free["usage"]["output_tokens"]
    assert create(max_output_tokens=30, min_tokens=30,
                  ignore_eos=False)["usage"]["output_tokens"] == 30


def _turn_counts(deployment) -> dict:
    urls = deployment.metrics_urls
    scheduler, gateway = scrape(urls["scheduler"]), scrape(urls["gateway"])
    return {"scheduler_cancelled": _count(scheduler, "bidaw_turns_total", outcome="cancelled"),
            "gateway_cancelled": _count(gateway, "bidaw_turns_total", outcome="cancelled"),
            "http_499": _count(gateway, "bidaw_gateway_requests_total", status="499")}


def test_a_client_that_leaves_once_the_answer_has_ended_cancelled_nothing(deployment):
    before = _turn_counts(deployment)
    for _ in range(3):  # chat: closes on the finish chunk, before [DONE]
        conn, reply = _post(deployment, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"[{uuid.uuid4().hex[:8]}] Hi."}],
            "max_tokens": 4, "stream": True})
        for event in _events(reply):
            if event != "[DONE]" and event["choices"][0]["finish_reason"]:
                break
        conn.sock.close()
        conn.close()
    # Responses: closes on response.completed / incomplete (OpenAI sends no [DONE] there)
    conn, reply = _post(deployment, "/v1/responses", {
        "input": f"[{uuid.uuid4().hex[:8]}] Hi.", "max_output_tokens": 4, "stream": True})
    for event in _events(reply):
        if event["type"] == "response.created":
            response_id = event["response"]["id"]
        if event["type"] in ("response.completed", "response.incomplete"):
            break
    conn.sock.close()
    conn.close()
    time.sleep(3)  # what the gateway and scheduler do after the close
    after = _turn_counts(deployment)
    assert after == before
    # the response was stored: a client that left may still follow it
    host, port = deployment.gateway_url.split("//")[1].split("/")[0].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", f"/v1/responses/{response_id}")
    got = conn.getresponse()
    assert got.status == 200 and json.loads(got.read())["id"] == response_id
    conn.close()
