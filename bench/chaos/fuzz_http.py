"""Property-based fuzzing (hypothesis) of the HTTP gateway: malformed JSON bodies, raw bytes,
odd methods, paths and Content-Lengths, and well-formed requests with adversarial session ids.
Passing: every request gets an HTTP answer, never a 5xx other than deliberate 503 shedding."""
from __future__ import annotations

import http.client
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.chaos.fuzz_judge import SETTINGS, Tally, session_ids


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
    st.text(max_size=30), lambda kids: st.lists(kids, max_size=4) |
    st.dictionaries(st.text(max_size=10), kids, max_size=4), max_leaves=12)
good_messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "user", "system", "assistant", "tool", "x"]),
     "content": st.one_of(st.text(max_size=40), st.text(max_size=40), json_values)}),
    min_size=1, max_size=3)
chat_bodies = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["smollm2-135m"] * 4 + ["", "gpt-4"]), json_values),
     "messages": st.one_of(good_messages, good_messages, json_values),
     "prompt": st.one_of(st.text(max_size=40), st.text(max_size=40), json_values)},
    optional={"max_tokens": st.one_of(st.integers(-5, 2), st.integers(-2**63, 2**63),
                                      json_values),
              "max_completion_tokens": st.integers(-5, 2), "temperature": json_values,
              "stream": json_values, "n": json_values, "stop": json_values,
              "user": session_ids, "seed": json_values})
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=300)


def fuzz_http(host: str, port: int, examples: int = 100, api_key: str = "") -> Tally:
    tally = Tally()
    auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def request(method: str, path: str, body: bytes | None, headers: dict) -> int:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            reply = conn.getresponse()
            reply.read()
            return reply.status
        finally:
            conn.close()

    def judge(what: str, method: str, path: str, body: bytes | None, headers: dict) -> None:
        tally.inputs += 1
        try:
            status = request(method, path, body, headers)
        except (OSError, http.client.HTTPException) as exc:
            tally.crashes.append(f"{what}: no HTTP answer ({type(exc).__name__}: {exc})")
            return
        tally.saw(status)
        if status >= 500 and status not in (503,):
            tally.crashes.append(f"{what}: HTTP {status}")

    @settings(max_examples=examples, **SETTINGS)
    @given(body=chat_bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
           sid=header_text, stream=st.booleans())
    def json_bodies(body, path, sid, stream):
        if isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 2:
            body["max_tokens"] = 2  # valid requests run the real model: keep them short
        body.setdefault("max_tokens", 2)
        if stream:
            body["stream"] = True
        judge(f"POST {path} {json.dumps(body)[:160]}", "POST", path, json.dumps(body).encode(),
              {"Content-Type": "application/json", "X-Session-Id": sid, **auth})

    @settings(max_examples=examples, **SETTINGS)
    @given(raw=st.one_of(st.binary(max_size=200), st.just(b"{" * 5000), st.just(b"[]"),
                         st.just(b'{"model": "smollm2-135m", "messages": [')),
           method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS"]),
           path=st.one_of(st.sampled_from(["/v1/chat/completions", "/v1/completions",
                                           "/v1/models", "/health", "/metrics", "/",
                                           "/v1/../../etc/passwd", "/v1/models/%00",
                                           "/" + "a" * 5000]),
                          st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e),
                                  max_size=40).map(lambda p: "/" + p)),
           length=st.one_of(st.none(), st.sampled_from(["-1", "99999999999", "abc", "0"])))
    def raw_bytes(raw, method, path, length):
        headers = {"Content-Type": "application/json", **auth}
        if length is not None:
            headers["Content-Length"] = length
        judge(f"{method} {path[:60]} {raw[:40]!r} (Content-Length {length})", method, path,
              raw if method not in ("GET",) else None, headers)

    @settings(max_examples=max(5, examples // 4), **SETTINGS)
    @given(sid=header_text, user=session_ids, text=st.text(max_size=60),
           path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
           stream=st.booleans())
    def valid_bodies(sid, user, text, path, stream):
        """Well-formed requests (they run the model) with adversarial session ids."""
        body = {"model": "smollm2-135m", "max_tokens": 2, "stream": stream, "user": user}
        if path.endswith("chat/completions"):
            body["messages"] = [{"role": "user", "content": text or "hi"}]
        else:
            body["prompt"] = text or "hi"
        judge(f"POST {path} session {sid[:40]!r} user {user[:40]!r}", "POST", path,
              json.dumps(body).encode(),
              {"Content-Type": "application/json", "X-Session-Id": sid, **auth})

    json_bodies()
    raw_bytes()
    valid_bodies()
    judge("POST oversized body (9 MB)", "POST", "/v1/chat/completions",
          b'{"messages": [{"role": "user", "content": "' + b"x" * (9 << 20) + b'"}]}',
          {"Content-Type": "application/json", **auth})
    judge("GET /health after fuzzing", "GET", "/health", None, {})
    return tally
