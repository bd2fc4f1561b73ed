"""SGLang's native /generate over a real gateway and a fake scheduler: the body maps to the same
TurnRequest a completion builds, answers have SGLang's shape, and every unsupported option or bad
field gets a 400 naming it."""
from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from tests.test_gateway_api import assert_error, fake, post, raw  # noqa: F401 (fake: a fixture)

KEY = "sk-native-test"


@pytest.fixture(scope="module")
def gateway(fake):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake[0].port}",
                           request_timeout_s=30, api_keys=f"acme:{KEY}",
                           max_prompt_bytes=1000, max_waiting=0)  # "!exhausted": 429 now
    with BackgroundGateway(config) as gw:
        yield gw


AUTH = {"Authorization": f"Bearer {KEY}"}


def generate(gw, body, headers=None):
    return post(gw, "/generate", body, {**AUTH, **(headers or {})})


def body(text="one two three four", **sampling) -> dict:
    """What SGLang's bench_multiturn sends."""
    return {"text": text, "sampling_params": {"temperature": 0.0, "max_new_tokens": 3,
                                              "ignore_eos": True, **sampling},
            "stream": False, "lora_path": "", "return_logprob": False, "logprob_start_len": -1}


def stream(gw, payload, headers=None) -> list:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("POST", "/generate", json.dumps({**payload, "stream": True}),
                 {"Content-Type": "application/json", **AUTH, **(headers or {})})
    reply = conn.getresponse()
    assert reply.status == 200 and reply.getheader("Content-Type") == "text/event-stream"
    events = [e for e in reply.read().decode().split("\n\n") if e]
    conn.close()
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    return [json.loads(e[len("data: "):]) for e in events[:-1]]


def test_bench_multiturn_body_maps_to_the_completion_turn(gateway, fake):
    status, _, got = generate(gateway, body(top_p=0.5, top_k=7, stop=["END"], seed=3,
                                            presence_penalty=0.5, frequency_penalty=-0.5,
                                            repetition_penalty=1.5, min_p=0.25))
    assert status == 200, got
    sent = fake[1].requests[-1]
    assert (sent.raw_prompt, sent.max_tokens, sent.temperature, sent.ignore_eos) == (
        "one two three four", 3, 0.0, True)
    assert (round(sent.top_p, 3), sent.top_k, list(sent.stop), sent.seed) == (0.5, 7, ["END"], 3)
    assert (sent.presence_penalty, sent.frequency_penalty) == (0.5, -0.5)
    assert (sent.repetition_penalty, sent.min_p) == (1.5, 0.25)
    assert sent.tenant == "acme" and sent.session_id == "" and not sent.messages
    assert got["text"] == "echo: one two"
    meta = got["meta_info"]
    assert (meta["prompt_tokens"], meta["completion_tokens"], meta["cached_tokens"]) == (4, 3, 0)
    assert meta["finish_reason"] == {"type": "length", "length": 3} and len(meta["id"]) == 32


def test_stream_text_is_cumulative_and_the_last_chunk_has_meta_info(gateway):
    chunks = stream(gateway, body("a b c d e", max_new_tokens=16))
    texts = [c["text"] for c in chunks]
    assert texts == ["echo:", "echo: a", "echo: a b", "echo: a b c", "echo: a b c d",
                     "echo: a b c d e", "echo: a b c d e"]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    last = chunks[-1]["meta_info"]
    assert last["finish_reason"]["type"] == "stop"
    assert (last["prompt_tokens"], last["completion_tokens"]) == (5, 6)
    assert len({c["meta_info"]["id"] for c in chunks}) == 1


def test_session_header_scopes_and_cached_tokens_follow(gateway, fake):
    first = generate(gateway, body("x y z"), {"X-Session-Id": "native-s"})
    assert fake[1].requests[-1].session_id == "acme/native-s"
    assert first[1]["x-bidaw-session"] == "native-s"
    second = generate(gateway, body("x y z w v"), {"X-Session-Id": "native-s"})
    assert second[2]["meta_info"]["cached_tokens"] == 4  # what the fake stored: 3 + 3 - 1 cap


def test_input_ids_are_passed_through(gateway, fake):
    payload = body()
    del payload["text"]
    payload["input_ids"] = [1, 2, 49151]
    assert generate(gateway, payload)[0] == 200
    sent = fake[1].requests[-1]
    assert list(sent.prompt_token_ids) == [1, 2, 49151] and sent.raw_prompt == ""


def test_default_max_new_tokens_is_sglangs(gateway, fake):
    generate(gateway, {"text": "hi"})
    assert fake[1].requests[-1].max_tokens == 128


def test_model_if_sent_must_be_served(gateway):
    assert generate(gateway, {"text": "hi", "model": "smollm2-135m"})[0] == 200
    status, _, got = generate(gateway, {"text": "hi", "model": "gpt-4"})
    assert_error(status, got, 404)
    assert got["error"]["param"] == "model"


def _without(payload, key):
    payload = dict(payload)
    del payload[key]
    return payload


@pytest.mark.parametrize("payload, param", [
    ({**body(), "return_logprob": "yes"}, "return_logprob"),
    ({**body(), "return_logprob": True, "logprob_start_len": -2}, "logprob_start_len"),
    ({**body(), "return_logprob": True, "top_logprobs_num": 21}, "top_logprobs_num"),
    ({**body(), "lora_path": "adapter-1"}, "lora_path"),
    ({**body(), "top_logprobs_num": 5}, "top_logprobs_num"),
    ({**body(), "image_data": "http://x/y.png"}, "image_data"),
    ({**body(), "session_params": {"id": "s"}}, "session_params"),
    (body(n=2), "sampling_params.n"),
    (body(regex="[a-z]+"), "sampling_params.regex"),
    (body(json_schema="{}"), "sampling_params.json_schema"),
    (body(ebnf="root ::= 'a'"), "sampling_params.ebnf"),
    (body(stop_token_ids=[2]), "sampling_params.stop_token_ids"),
    (body(min_new_tokens=200), "sampling_params.min_new_tokens"),  # above max_new_tokens 128
    (body(skip_special_tokens=False), "sampling_params.skip_special_tokens"),
    (body(repetition_penalty=2.1), "sampling_params.repetition_penalty"),
    (body(min_p=1.5), "sampling_params.min_p"),
    (body(frobnicate=1), "sampling_params.frobnicate"),
    (body(max_new_tokens=-1), "sampling_params.max_new_tokens"),
    (body(max_new_tokens=0, min_new_tokens=2), "sampling_params.min_new_tokens"),
    (body(max_new_tokens=8193), "sampling_params.max_new_tokens"),  # beyond the context
    (body(temperature=3), "sampling_params.temperature"),
    (body(top_p=0), "sampling_params.top_p"),
    (body(stop=[1]), "sampling_params.stop"),
    (body(ignore_eos="yes"), "sampling_params.ignore_eos"),
    ({**body(), "input_ids": [1]}, "text"),  # both
    (_without(body(), "text"), "text"),  # neither
    (body(""), "text"),
    (body("x" * 1001), "text"),  # over --max-prompt-bytes
    ({**_without(body(), "text"), "input_ids": [49152]}, "input_ids"),
    ({**_without(body(), "text"), "input_ids": ["a"]}, "input_ids"),
    ({**body(), "sampling_params": [1]}, "sampling_params"),
    ({**body(), "stream": "yes"}, "stream"),
])
def test_bad_or_unsupported_fields_get_400_naming_them(gateway, fake, payload, param):
    before = len(fake[1].requests)
    status, _, got = generate(gateway, payload)
    assert_error(status, got, 400)
    assert got["error"]["param"] == param, got
    assert len(fake[1].requests) == before  # refused before the scheduler


def test_auth_is_required_and_errors_are_json(gateway):
    status, _, got = post(gateway, "/generate", body())
    assert_error(status, got, 401)
    status, _, got = raw(gateway, "POST", "/generate", b"{not json", AUTH)
    assert_error(status, got, 400)
    status, _, got = raw(gateway, "POST", "/flush_cache")
    assert_error(status, got, 401)


def test_scheduler_errors_map_as_on_the_openai_routes(gateway):
    assert_error(*generate(gateway, body("!exhausted"))[::2], 429)
    assert_error(*generate(gateway, body("!unavailable"))[::2], 503)
    chunks = stream(gateway, body("!midstream"))
    assert chunks[-1]["error"]["code"] == "internal_error"


def test_helpers_flush_model_info_health(gateway, fake):
    # (a scheduler without FlushSessions, as this fake: 501; the live flush: test_flush_cache_e2e)
    status, _, got = raw(gateway, "POST", "/flush_cache", None, AUTH)
    assert_error(status, got, 501)
    status, _, got = raw(gateway, "GET", "/get_model_info", None, AUTH)
    assert status == 200 and got["is_generation"] is True
    assert got["model_path"] == gateway.config.served_model_name[0]
    status, _, got = raw(gateway, "GET", "/health_generate")
    assert status == 200 and got == {"status": "ok"}


ODD = [None, True, 0, -1, 1.5, "s", "", [], [1], {}, {"a": 1}, 2 ** 70]
FIELDS = ["text", "input_ids", "sampling_params", "stream", "lora_path", "return_logprob",
          "logprob_start_len", "top_logprobs_num", "image_data", "rid"]
SAMPLING = ["max_new_tokens", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
            "frequency_penalty", "repetition_penalty", "logit_bias", "seed", "stop",
            "ignore_eos", "n", "skip_special_tokens", "spaces_between_special_tokens",
            "regex", "json_schema", "ebnf", "structural_tag", "stop_token_ids",
            "min_new_tokens", "no_stop_trim"]


def test_any_value_in_any_field_is_answered_or_refused_never_a_500(gateway):
    """Every field, every JSON type: 200 (a value that means something) or a 400 naming the
    field."""
    seen = []
    for name in FIELDS + [f"sampling_params.{n}" for n in SAMPLING]:
        for value in ODD:
            if name == "stream" and value is True:
                continue  # an SSE answer: the stream tests read those
            payload = body()
            if name.startswith("sampling_params."):
                payload["sampling_params"][name.split(".", 1)[1]] = value
            else:
                payload[name] = value
            if name == "input_ids" and value is not None:
                del payload["text"]
            status, headers, got = generate(gateway, payload)
            seen.append(status)
            assert status in (200, 400), (name, value, got)
            if status == 400:
                assert_error(status, got, 400)
                assert got["error"]["param"] and got["error"]["param"].split(".")[0] in (
                    name.split(".")[0], "text"), (name, value, got)
            else:
                assert "meta_info" in got and headers["x-request-id"] == got["meta_info"]["id"]
    assert seen.count(400) > len(seen) // 2 and seen.count(200) > 20


def _wait(predicate, seconds=10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def test_generate_shares_the_openai_routes_admission(fake):
    """One slot, no waiting: a /generate in flight sheds both a completion and a /generate."""
    _, scheduler = fake
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{fake[0].port}",
                           request_timeout_s=30, api_keys=f"acme:{KEY}", max_in_flight=1,
                           max_waiting=0)
    with BackgroundGateway(config) as gw:
        scheduler.release.clear()
        scheduler.blocked = 0
        held = []
        thread = threading.Thread(target=lambda: held.append(generate(gw, body("!block"))[0]))
        thread.start()
        assert _wait(lambda: scheduler.blocked == 1)
        other = generate(gw, body("x"))
        completion = post(gw, "/v1/completions", {"prompt": "x"}, AUTH)
        scheduler.release.set()
        thread.join(30)
    assert_error(other[0], other[2], 429, "in flight")
    assert_error(completion[0], completion[2], 429, "in flight")
    assert held == [200]


def test_client_hanging_up_mid_stream_cancels_the_turn(gateway, fake):
    _, scheduler = fake
    scheduler.release.clear()
    scheduler.blocked = scheduler.cancelled = 0
    conn = http.client.HTTPConnection("127.0.0.1", gateway.port, timeout=30)
    conn.request("POST", "/generate", json.dumps({**body("!block"), "stream": True}),
                 {"Content-Type": "application/json", **AUTH})
    assert _wait(lambda: scheduler.blocked == 1)
    conn.close()
    assert _wait(lambda: scheduler.cancelled == 1)
    scheduler.release.set()


def test_sglang_bench_serving_body_is_served_and_reports_where_the_cache_was(gateway):
    """What SGLang 0.5's bench_serving sends with every /generate (its default backend): every
    request used to be a 400 for return_routed_experts false."""
    payload = {"text": "alpha beta gamma", "sampling_params": {
        "temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}, "stream": False,
        "lora_path": None, "return_logprob": False, "return_routed_experts": False,
        "logprob_start_len": -1, "log_metrics": True}
    headers = {"X-Session-Id": "bench-serving"}
    assert generate(gateway, payload, headers)[0] == 200
    status, _, got = generate(gateway, {**payload, "text": "alpha beta gamma delta"}, headers)
    assert status == 200, got
    meta = got["meta_info"]
    assert meta["cached_tokens"] > 0  # the fake's stored KV, read from DRAM
    assert meta["cached_tokens_details"] == {"device": 0, "host": meta["cached_tokens"]}
    chunks = stream(gateway, {**payload, "text": "alpha beta gamma delta eps"}, headers)
    assert chunks[-1]["meta_info"]["cached_tokens_details"]["host"] > 0
    for name, value in (("return_routed_experts", True), ("return_entropy", True),
                        ("token_ids_logprob", [5]), ("priority", 3)):
        status, _, got = generate(gateway, {**payload, name: value})
        assert_error(status, got, 400)
        assert got["error"]["param"] == name


def test_sglang_model_and_server_info(gateway):
    for path in ("/model_info", "/get_model_info", "/server_info", "/get_server_info"):
        status, _, got = raw(gateway, "GET", path, None, AUTH)
        assert status == 200 and got["model_path"] == gateway.config.served_model_name[0]
        names = gateway.config.served_model_name
        assert got["tokenizer_path"] == next((n for n in names if "/" in n), None)
        assert raw(gateway, "GET", path)[0] == 401  # a tenant's key, as for every route
    status, _, got = raw(gateway, "GET", "/server_info", None, AUTH)
    assert got["internal_states"] == [] and got["version"]
    assert KEY not in json.dumps(got)
