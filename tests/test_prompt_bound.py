"""Prompts that cannot fit the context are refused by size before anything tokenises them: at
the gateway (never reaching the scheduler) and at the worker (before the text crosses to the
engine actor), so repeated over-long prompts leave the worker's memory flat. The bound is
context tokens x the longest token's bytes, which never refuses a prompt that fits."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compute_worker.prompt import TurnError
from compute_worker.prompt_bound import check_turn_size, longest_token_bytes, prompt_byte_bound
from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.runtime.gen import common_pb2, compute_worker_pb2, compute_worker_pb2_grpc
from services.runtime.grpc_util import channel
from tests.fake_scheduler import start_fake_scheduler

BOUND = GatewayConfig().max_prompt_bytes


def test_the_gateway_default_is_the_bound_of_the_served_model(smollm):
    model, tokenizer = smollm
    assert longest_token_bytes(tokenizer) == 81
    assert prompt_byte_bound(tokenizer, model.config.max_position) == BOUND == 8192 * 81


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(text=st.one_of(st.text(max_size=400), st.text(st.sampled_from(" \n\t"), max_size=2000),
                      st.text(st.characters(min_codepoint=0x4e00, max_codepoint=0x4e80),
                              max_size=200)))
def test_no_token_stands_for_more_text_than_the_longest_one(smollm, text):
    """The premise of the bound: tokens >= bytes / L, for content inside the chat template."""
    _, tokenizer = smollm
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}])
    assert len(ids) * longest_token_bytes(tokenizer) >= len(text.encode())


@pytest.mark.parametrize("turn,refused", [
    (common_pb2.TurnRequest(raw_prompt="x" * 101), True),
    (common_pb2.TurnRequest(raw_prompt="x" * 50, messages=[common_pb2.ChatMessage(
        content="é" * 26)]), True),  # 50 + 52 bytes
    (common_pb2.TurnRequest(raw_prompt="x" * 50, messages=[common_pb2.ChatMessage(
        content="é" * 25)]), False),  # exactly 100
    (common_pb2.TurnRequest(prompt_token_ids=[1] * 16), True),
    (common_pb2.TurnRequest(prompt_token_ids=[1] * 15), False),
    (common_pb2.TurnRequest(raw_prompt="x", max_tokens=17), True),  # no context holds it
    (common_pb2.TurnRequest(raw_prompt="x", max_tokens=16, min_tokens=16), False),  # clamped
    (common_pb2.TurnRequest(raw_prompt="x", min_tokens=17), True),
])
def test_the_worker_check_counts_every_text_and_token_ids(turn, refused):
    try:
        check_turn_size(turn, max_prompt_bytes=100, max_context=16)
    except TurnError:
        assert refused
    else:
        assert not refused


@pytest.fixture(scope="module")
def gateway_and_fake():
    server, fake = start_fake_scheduler()
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=f"127.0.0.1:{server.port}",
                           request_timeout_s=30)
    with BackgroundGateway(config) as gw:
        yield gw, fake
    server.stop(0)


def post(url: str, path: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url.removesuffix("/v1") + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("chat", [True, False])
def test_the_gateway_refuses_an_over_long_prompt_before_the_scheduler(gateway_and_fake, chat):
    gw, fake = gateway_and_fake
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def body(n: int) -> dict:
        if chat:
            return {"messages": [{"role": "system", "content": "é" * 10},
                                 {"role": "user", "content": "x" * (n - 20)}]}
        return {"prompt": "x" * n}

    before = len(fake.requests)
    status, reply = post(gw.url, path, body(BOUND + 1))
    assert status == 400, reply
    assert reply["error"]["param"] == ("messages" if chat else "prompt")
    assert len(fake.requests) == before
    status, reply = post(gw.url, path, body(BOUND))  # at the bound: passed on
    assert status == 200, reply
    assert len(fake.requests) == before + 1


def tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (Ray's raylet and actors)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as fh:
                total += next(int(line.split()[1]) * 1024 for line in fh
                              if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total


def test_over_long_prompts_leave_the_worker_memory_flat(deployment):
    worker = dict(deployment.procs)["worker"]
    stub = compute_worker_pb2_grpc.ComputeWorkerStub(channel(deployment.worker_target))
    text = "hello world " * 333_334  # 4,000,008 characters

    def over_long(i: int) -> grpc.StatusCode:
        turn = common_pb2.TurnRequest(session_id=f"huge-{i}", messages=[
            common_pb2.ChatMessage(role="user", content=text)])
        try:
            for _ in stub.RunTurn(compute_worker_pb2.WorkerTurnRequest(request_id=str(i),
                                                                        turn=turn), timeout=120):
                pass
        except grpc.RpcError as exc:
            assert "bytes of text" in exc.details()
            return exc.code()
        return grpc.StatusCode.OK

    before = tree_rss(worker.pid)
    with ThreadPoolExecutor(6) as pool:
        for _ in range(3):
            codes = list(pool.map(over_long, range(6)))
            assert codes == [grpc.StatusCode.INVALID_ARGUMENT] * 6
    grown = tree_rss(worker.pid) - before
    assert grown < 150 << 20, f"worker tree grew by {grown >> 20} MiB"
    status, reply = post(deployment.gateway_url, "/v1/chat/completions",
                         {"messages": [{"role": "user", "content": text}]})
    assert status == 400 and reply["error"]["param"] == "messages", reply
