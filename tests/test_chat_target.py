"""`bidaw chat --target`: the gateway's URL (as `bidaw up` prints it, with or without /v1) is
spoken to over the OpenAI HTTP API, a HOST:PORT over the scheduler's gRPC; anything else, or a
HOST:PORT that answers HTTP, gets a message saying which is expected. Real processes: the
`bidaw` CLI as a subprocess, a real gateway and a gRPC scheduler (the fake one, no model)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fake_scheduler import gateway_over_fake

KEY = "sk-chat-test-1"


@pytest.fixture(scope="module")
def stack():
    with gateway_over_fake(f"t1:{KEY}") as running:
        yield running


def chat(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "services.cli.main", "chat", "--json", *args],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def turns(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("suffix", ["", "/v1", "/v1/"])
def test_the_gateway_url_is_spoken_to_over_http(stack, suffix):
    server, fake, gw = stack
    before = len(fake.requests)
    done = chat("--target", f"http://127.0.0.1:{gw.port}{suffix}", "--api-key", KEY,
                "--session", f"s-http{suffix.strip('/')}", "-m", "hello there", "-m", "again")
    assert done.returncode == 0, done.stderr
    first, second = turns(done.stdout)
    assert first["answer"] == "echo: hello there" and second["answer"] == "echo: again"
    assert second["cached_tokens"] > 0 and second["kv_tier"] == "dram"  # from the usage chunk
    got = fake.requests[before:]
    assert len(got) == 2 and got[0].tenant == "t1"  # through the gateway: the tenant's
    assert got[1].session_id == f"t1/s-http{suffix.strip('/')}"
    assert [m.content for m in got[1].messages] == ["hello there", "echo: hello there",
                                                   "again"]


def test_the_api_key_comes_from_the_environment_and_a_wrong_one_is_reported(stack):
    _, _, gw = stack
    url = f"http://127.0.0.1:{gw.port}"
    assert chat("--target", url, "-m", "hi", env={"BIDAW_API_KEY": KEY}).returncode == 0
    done = chat("--target", url, "-m", "hi", env={"BIDAW_API_KEY": "wrong"})
    assert done.returncode == 1 and "HTTP 401" in done.stderr and "API key" in done.stderr


def test_a_scheduler_address_is_spoken_to_over_grpc(stack):
    server, fake, _ = stack
    before = len(fake.requests)
    done = chat("--target", f"127.0.0.1:{server.port}", "--session", "s-grpc", "-m", "hey")
    assert done.returncode == 0, done.stderr
    assert turns(done.stdout)[0]["answer"] == "echo: hey"
    assert fake.requests[before].session_id == "s-grpc"  # no tenant prefix: not the gateway


def test_end_frees_the_session_after_the_last_message_over_http_and_grpc(stack):
    server, fake, gw = stack
    done = chat("--target", f"http://127.0.0.1:{gw.port}", "--api-key", KEY, "--session",
                "s-end", "-m", "bye", "--end")
    assert done.returncode == 0, done.stderr
    assert fake.ended[-1] == "t1/s-end" and "session s-end ended" in done.stderr
    done = chat("--target", f"127.0.0.1:{server.port}", "--session", "s-end-g", "-m", "bye",
                "--end")
    assert done.returncode == 0 and fake.ended[-1] == "s-end-g", done.stderr
    done = chat("--target", f"http://127.0.0.1:{gw.port}", "--api-key", "wrong", "--session",
                "s-gone", "-m", "x", "--end")
    assert done.returncode == 1 and "401" in done.stderr  # the turn fails first: no end sent
    assert fake.ended[-1] == "s-end-g"


def test_the_gateway_port_given_as_host_port_says_to_use_the_url(stack):
    _, _, gw = stack
    done = chat("--target", f"127.0.0.1:{gw.port}", "-m", "hi")
    assert done.returncode == 1
    assert "answers HTTP/1.1, not the scheduler's gRPC" in done.stderr
    assert f"--target http://127.0.0.1:{gw.port}/v1" in done.stderr


@pytest.mark.parametrize("target", ["grpc://127.0.0.1:50052", "localhost", "http//x:1",
                                    "127.0.0.1:port", "ftp://127.0.0.1:21"])
def test_other_targets_say_what_is_expected(target):
    done = chat("--target", target, "-m", "hi")
    assert done.returncode == 2, done.stderr
    assert "--target" in done.stderr and "gateway's URL" in done.stderr
    assert "HOST:PORT" in done.stderr and "Traceback" not in done.stderr


def test_a_gateway_url_where_nothing_listens_is_reported_plainly():
    from services.launch.launcher import free_port

    done = chat("--target", f"http://127.0.0.1:{free_port()}", "-m", "hi")
    assert done.returncode == 1 and "Connection refused" in done.stderr
    assert "Traceback" not in done.stderr


def test_input_that_is_not_utf8_is_refused_after_the_turns_before_it(stack):
    # stdin and argv keep undecodable bytes as lone surrogates, which gRPC cannot encode: it
    # was a UnicodeEncodeError traceback
    server, fake, _ = stack
    before = len(fake.requests)
    done = subprocess.run([sys.executable, "-m", "services.cli.main", "chat", "--json",
                           "--target", f"127.0.0.1:{server.port}", "--session", "s-bytes"],
                          input=b"first\nsecond \xff\xfe\nthird\n", capture_output=True,
                          timeout=120, env={**os.environ, "LANG": "C.UTF-8"})
    assert done.returncode == 2
    assert done.stderr.decode().strip() == ("bidaw chat: input line 2 is not UTF-8 text "
                                            "(character 8); nothing of it was sent")
    assert [t["answer"] for t in turns(done.stdout.decode())] == ["echo: first"]
    assert [r.messages[-1].content for r in fake.requests[before:]] == ["first"]
