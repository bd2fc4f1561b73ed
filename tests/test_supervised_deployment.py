"""`bidaw up`'s deployment heals itself: each of its four processes killed with -9 comes back by
itself on its port, turns succeed again, the gateway's /health says degraded meanwhile, a
killed store's DRAM arena in /dev/shm is reclaimed while reuse of SSD KV returns, and a killed
scheduler still recognises a conversation sent without a session id."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import time
import urllib.error
import urllib.request

import pytest

from services.client.chat_client import ChatClient, Conversation
from services.runtime.grpc_util import wait_healthy
from services.launch.launcher import LocalDeployment
from services.launch.supervisor import RestartPolicy
from tests.shared_ray import OWN_RAY

QUESTION = ("Please describe, in a few sentences, what the weather is usually like in Paris in "
            "spring and in autumn, for a visitor who has never been there.")


@pytest.fixture(scope="module")
def dep(tmp_path_factory):
    lines: list[str] = []
    d = LocalDeployment(data_dir=str(tmp_path_factory.mktemp("supervised")), dram_bytes="4MiB",
                        default_max_tokens=16, on_restart=lines.append,
                        # a 3-s first delay keeps a killed service down long enough for
                        # /health (cached 1 s) to be seen saying so: a warm restart takes < 1 s
                        restart_policy=RestartPolicy(first_delay_s=3.0, healthy_s=5.0),
                        extra_env=OWN_RAY)  # the worker's own Ray must die with it
    d.lines = lines
    with d:
        yield d


def _pid(dep, name: str) -> int:
    return dict(dep.procs)[name].pid


def _kill9(dep, name: str) -> int:
    pid = _pid(dep, name)
    os.kill(pid, signal.SIGKILL)
    return pid


def _until(check, timeout: float, what: str, every: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # noqa: BLE001 - the service is still coming back
            last = exc
        else:
            last = got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout:.0f} s (last: {last!r})")
        time.sleep(every)


def _health(dep) -> tuple[int, dict]:
    url = f"http://{dep.host}:{dep.gateway_port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _came_back(dep, name: str, old: int, timeout: float = 240.0) -> None:
    _until(lambda: _pid(dep, name) != old, timeout, f"{name} restarted")
    assert not pathlib.Path(f"/proc/{old}").exists(), f"{name} {old} left a zombie"
    if name != "gateway":  # the new process itself serves (not a cached verdict)
        wait_healthy(getattr(dep, f"{name}_target"), timeout)
    _until(lambda: _health(dep)[0] == 200, timeout, f"/health 200 after {name} came back")


def _chat(dep, session: str) -> dict:
    body = json.dumps({"model": dep.model, "max_tokens": 4, "user": session,
                       "messages": [{"role": "user", "content": "Say hi."}]}).encode()
    request = urllib.request.Request(f"{dep.gateway_url}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def test_killed_store_comes_back_with_its_shm_reclaimed_and_reuse(dep):
    client = ChatClient(dep.scheduler_target, timeout=120)
    conv = Conversation(client, "heal-store")
    conv.say(QUESTION, max_tokens=16)
    shm = pathlib.Path("/dev/shm")
    old = _pid(dep, "store")
    arenas = list(shm.glob(f"bidaw-store-{old}-*"))
    assert arenas, "the store's arena is not in /dev/shm"
    time.sleep(2.0)  # the turn's KV reaches the SSD (acknowledged writes may trail the answer)
    _kill9(dep, "store")
    killed = time.monotonic()
    _came_back(dep, "store", old)
    assert not any(a.exists() for a in arenas), "the dead store's arena is still in /dev/shm"
    assert list(shm.glob(f"bidaw-store-{_pid(dep, 'store')}-*"))

    def reused():
        r = client.turn(conv.session_id, conv.messages + [
            {"role": "user", "content": "Thanks!"}], max_tokens=4)
        return r.summary.cached_tokens > 0
    _until(reused, 30.0 - (time.monotonic() - killed) + 30.0, "reuse after the store restart")
    assert any(line.startswith("store killed by SIGKILL") for line in dep.lines), dep.lines
    assert any(line.startswith("store restarted") for line in dep.lines), dep.lines


def test_killed_worker_comes_back_and_health_says_degraded_meanwhile(dep):
    old = _kill9(dep, "worker")
    status, body = _until(lambda: (lambda s, b: (s, b) if s == 503 else None)(*_health(dep)),
                          60.0, "/health 503 while the worker is down", every=0.1)
    assert "no healthy compute worker" in body["error"]["message"], body
    _came_back(dep, "worker", old)
    try:
        os.killpg(old, 0)
        leftovers = True
    except ProcessLookupError:
        leftovers = False
    assert not leftovers, "the killed worker's Ray processes outlived it"
    _until(lambda: _chat(dep, "after-worker")["usage"]["completion_tokens"] >= 1, 120.0,
           "a turn after the worker restart")


def _ask(dep, messages: list[dict]) -> tuple[dict, str]:
    """A chat turn as third-party clients send it: no session id. (reply, session used)"""
    body = json.dumps({"model": dep.model, "max_tokens": 8, "temperature": 0,
                       "messages": messages}).encode()
    request = urllib.request.Request(f"{dep.gateway_url}/chat/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read()), reply.headers["x-bidaw-session"]


def test_killed_scheduler_comes_back_knowing_its_conversations(dep):
    messages = [{"role": "user", "content": QUESTION}]
    first, session = _ask(dep, messages)
    messages += [first["choices"][0]["message"], {"role": "user", "content": "And in winter?"}]
    time.sleep(2.0)  # the turn's KV reaches the store (acknowledged writes may trail the answer)
    old = _kill9(dep, "scheduler")
    status, body = _until(lambda: (lambda s, b: (s, b) if s == 503 else None)(*_health(dep)),
                          30.0, "/health 503 while the scheduler is down", every=0.05)
    assert "scheduler is unreachable" in body["error"]["message"], body
    _came_back(dep, "scheduler", old)
    # the conversation index was journaled: the next turn, sent without a session id as
    # before, continues the same session and reuses its stored KV (not a recompute)
    second, again = _until(lambda: _ask(dep, messages), 120.0, "a turn after the restart")
    assert again == session
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= first["usage"]["prompt_tokens"], (cached, first["usage"])


def test_killed_gateway_comes_back_on_its_port(dep):
    old = _kill9(dep, "gateway")
    _came_back(dep, "gateway", old)
    assert _chat(dep, "after-gateway")["usage"]["completion_tokens"] >= 1
    assert dep.supervisor.restarts["gateway"] == 1


def test_stop_stops_everything_and_restarts_nothing(dep):
    procs = [p for _, p in dep.procs]
    ray_temp = list(pathlib.Path("/tmp").glob(f"ray-bidaw-{_pid(dep, 'worker')}-*"))
    assert ray_temp, "the worker's Ray temporary directory is not where expected"
    dep.stop()
    assert not any(d.exists() for d in ray_temp), "Ray's temporary directory left behind"
    assert all(p.poll() is not None for p in procs)
    time.sleep(1.0)
    assert all(p.poll() is not None for p in procs) and dep.procs == []
