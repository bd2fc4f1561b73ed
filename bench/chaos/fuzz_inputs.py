"""Seeded generators of malformed HTTP requests, by class, for the fast fuzzer (fuzz_fast.py):
each yields raw request bytes, so header bytes and bodies can be anything at all.

Classes: lone surrogates (escaped and as raw bytes, in every string field and in keys), JSON
nesting (shallow to 200,000 deep, balanced or not, inside strings), integers at and past every
width boundary in every numeric field and in token ids, header bytes (invalid UTF-8, encoded
surrogates, control bytes, very long values) in every header the gateway reads, and structural
junk (truncated JSON, wrong types, random bytes). Valid requests that slip through ask for one
token, so nothing here makes the model run long."""
from __future__ import annotations

import json
import random

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
HEADERS = ("X-Session-Id", "x-user-id", "Authorization", "traceparent", "tracestate")
INTS = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30,
        -1, -2**31 - 1, -2**63, -2**63 - 1, -10**30, 0, 1]
SURROGATES = ["\\ud800", "\\udfff", "\\ud83d", "a\\udc00b", "\\ud800\\ud800", "\\ude00x"]
RAW_SURROGATES = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xb2\x80"]
BAD_HEADER_BYTES = [b"\xff\xfe", b"\xed\xa0\x80", b"\xc3\x28", b"\x80", b"ok\xf0\x28\x8c\x28",
                    b"\x01", b"\x7f", b"a\x00b", b"x" * 9000]


def request(path: str, body: bytes, headers: dict[str, bytes] | None = None,
            api_key: str = "", method: bytes = b"POST") -> bytes:
    head = [method + b" " + path.encode() + b" HTTP/1.1", b"Host: fuzz", b"Connection: close",
            b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
    if api_key and not (headers and "Authorization" in headers):
        head.append(b"Authorization: Bearer " + api_key.encode())
    head += [name.encode() + b": " + value for name, value in (headers or {}).items()]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def _chat(**extra) -> dict:
    return {"model": "smollm2-135m", "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}], **extra}


def _body(d: dict) -> bytes:
    return json.dumps(d, separators=(",", ":")).encode()


def surrogates(rng: random.Random) -> tuple[str, bytes]:
    s = rng.choice(SURROGATES)
    where = rng.randrange(7)
    if where == 0:
        raw = b'{"model":"smollm2-135m","max_tokens":1,"messages":[{"role":"user","content":"%s"}]}'
    elif where == 1:
        raw = b'{"model":"smollm2-135m","max_tokens":1,"user":"%s","messages":[{"role":"user",' \
              b'"content":"hi"}]}'
    elif where == 2:
        raw = b'{"model":"smollm2-135m","max_tokens":1,"stop":["%s"],"messages":[{"role":' \
              b'"user","content":"hi"}]}'
    elif where == 3:
        raw = b'{"model":"%s","messages":[{"role":"user","content":"hi"}]}'
    elif where == 4:
        raw = b'{"model":"smollm2-135m","max_tokens":1,"%s":1,"messages":[]}'
    elif where == 5:
        return COMPLETIONS, b'{"model":"smollm2-135m","max_tokens":1,"prompt":"' + \
            rng.choice(RAW_SURROGATES) + b'"}'
    else:
        raw = b'{"model":"smollm2-135m","max_tokens":1,"messages":[{"role":"%s","content":"x"}]}'
    return rng.choice((CHAT, COMPLETIONS)) if where == 3 else CHAT, raw % s.encode()


def depth(rng: random.Random) -> tuple[str, bytes]:
    n = rng.choice([63, 64, 65, 100, 1000, 10_000, 100_000])
    opener, closer = rng.choice([(b"[", b"]"), (b'{"a":', b"}"), (b'[{"b":', b"}]")])
    inner = opener * n + b"1" + closer * (n if rng.random() < 0.8 else n // 2)
    where = rng.randrange(4)
    if where == 0:
        return CHAT, inner
    if where == 1:
        return CHAT, b'{"model":"smollm2-135m","max_tokens":1,"messages":' + inner + b"}"
    if where == 2:
        return COMPLETIONS, b'{"max_tokens":1,"prompt":' + inner + b"}"
    # brackets inside a string do not nest: refused for the empty messages, not the depth
    return CHAT, _body(_chat(stop=["[" * min(n, 5000)], messages=[]))


LONG_PROMPT = [1] * 8200  # more token ids than the context: a valid rest is refused cheaply


def integers(rng: random.Random) -> tuple[str, bytes]:
    value = rng.choice(INTS)
    field = rng.choice(["max_tokens", "max_completion_tokens", "seed", "n", "temperature",
                        "logprobs", "prompt", "top_p", "frequency_penalty"])
    if rng.random() < 0.05:  # too many digits for int()
        return COMPLETIONS, b'{"max_tokens":' + b"9" * rng.choice([4301, 20000]) + b"}"
    body = {"model": "smollm2-135m", "max_tokens": 1, "prompt": LONG_PROMPT}
    if rng.random() < 0.5:  # refused after every numeric field is read: cheap, and no model
        body.update(prompt="hi", user=0)
    if field == "prompt":
        body["prompt"] = [1, 2, value] + LONG_PROMPT
    else:
        body[field] = value
    return COMPLETIONS, _body(body)


def header_bytes(rng: random.Random) -> tuple[str, bytes, dict[str, bytes]]:
    name = rng.choice(HEADERS)
    value = rng.choice(BAD_HEADER_BYTES)
    if name == "Authorization":
        value = b"Bearer sk-" + value
    return CHAT, _body(_chat(messages=[])), {name: value}


def junk(rng: random.Random) -> tuple[str, bytes]:
    kind = rng.randrange(5)
    if kind == 0:
        good = _body(_chat())
        return CHAT, good[:rng.randrange(len(good))]
    if kind == 1:
        return CHAT, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == 2:
        return CHAT, _body(_chat(messages=rng.choice([None, 1, "x", {}, [[]], [{"role": 1}]])))
    if kind == 3:
        return COMPLETIONS, _body({"prompt": rng.choice([[], [True], [1.5], {}, None, [[]]])})
    return CHAT, _body(rng.choice([[], 1, "x", None]))


CLASSES = {"surrogates": surrogates, "depth": depth, "integers": integers,
           "header_bytes": header_bytes, "junk": junk}


def generate(cls: str, rng: random.Random, api_key: str = "") -> bytes:
    """One raw request of class `cls`."""
    made = CLASSES[cls](rng)
    path, body, headers = (*made, None) if len(made) == 2 else made
    return request(path, body, headers, api_key)
