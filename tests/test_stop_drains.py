"""One deployment per data directory: a second `bidaw up` on it is refused before it touches
anything (it used to start, rewrite the cluster token, and the first deployment's next restarted
service was refused by its peers: HTTP 500 "backend error UNAUTHENTICATED" on every turn; that
refusal is now a 503 saying the backend refused the gateway).

Stopping a deployment (`bidaw up` on Ctrl-C or SIGTERM, `LocalDeployment.stop`) lets the
answers being streamed finish: the gateway stops first and drains while the scheduler, the
worker and the store still serve. All stopped at once, the scheduler left after its 2-s grace
and a client streaming an answer got "the serving backend is unavailable" in the middle of it.
A scheduler stopped alone (a rolling restart) now lets the answers it relays finish too."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request

import pytest

from services.launch.launcher import LocalDeployment
from services.launch.service_process import lock_data_dir

TOKENS = 200


def _stream(url: str, out: dict, started: threading.Event) -> None:
    body = json.dumps({"model": "smollm2-135m", "stream": True, "temperature": 0,
                       "max_tokens": TOKENS, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "Tell me a long story."}]})
    req = urllib.request.Request(f"{url}/chat/completions", body.encode(),
                                 {"Content-Type": "application/json"})
    out["chunks"], out["errors"], out["finish"] = 0, [], None
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    out["errors"].append(event["error"])
                    continue
                out["chunks"] += 1
                if out["chunks"] == 3:
                    started.set()
                for choice in event.get("choices", []):
                    out["finish"] = choice.get("finish_reason") or out["finish"]
    except (OSError, urllib.error.URLError) as exc:
        out["errors"].append(repr(exc))
    finally:
        started.set()


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    d = LocalDeployment(data_dir=str(tmp_path_factory.mktemp("drain")), dram_bytes="16MiB",
                        on_restart=lambda line: None)  # its worker joins the tests' Ray
    d.start()
    yield d
    d.stop()


def test_a_second_deployment_on_the_same_data_dir_is_refused(dep):
    token = open(dep.token_file).read()
    second = LocalDeployment(data_dir=dep.data_dir, on_restart=lambda line: None)
    with pytest.raises(RuntimeError, match=f"--data-dir {dep.data_dir} is in use by another "
                                           f"deployment \\(pid {os.getpid()}\\)"):
        second.start()
    assert not second.services
    assert open(dep.token_file).read() == token  # untouched: the first keeps working


def _healthy(url: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5) as r:
                if r.status == 200:
                    return True
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    return False


def test_a_scheduler_told_to_stop_lets_the_answers_it_relays_finish(dep):
    """SIGTERM to the scheduler alone (a rolling restart): it left after 2 s, cutting them."""
    out: dict = {}
    started = threading.Event()
    client = threading.Thread(target=_stream, args=(dep.gateway_url, out, started))
    client.start()
    assert started.wait(240), "no answer started streaming"
    os.kill(dep.services["scheduler"].pid, signal.SIGTERM)
    client.join(240)
    assert not out["errors"], out
    assert out["finish"] == "length" and out["chunks"] >= TOKENS - 5, out
    assert _healthy(dep.gateway_url, 120)  # restarted by the supervisor, for the next test


def test_stop_lets_a_streaming_answer_finish(dep):
    out: dict = {}
    started = threading.Event()
    client = threading.Thread(target=_stream, args=(dep.gateway_url, out, started))
    try:
        client.start()
        assert started.wait(240), "no answer started streaming"
        assert not out["errors"], out
        began = time.monotonic()
        dep.stop(timeout=120)  # the drain's bound: far more than the answer needs
        stopped_s = time.monotonic() - began
    finally:
        dep.stop()
        client.join(60)
    assert not out["errors"], out
    assert out["finish"] == "length", out
    assert out["chunks"] >= TOKENS - 5, out  # every token of it (one chunk each, give or take)
    assert stopped_s < 120, stopped_s
    assert all(s.proc is None for s in dep.services.values())
    os.close(lock_data_dir(dep.run_dir))  # the data directory is free again
