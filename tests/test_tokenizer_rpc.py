"""The Tokenize RPC of the scheduler and of the worker: the cluster token is required, bad
requests are INVALID_ARGUMENT (the worker's vocabulary included), and the gateway's tokenizer
routes take the same API keys as a turn."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import grpc
import pytest

from services.runtime.gen import (common_pb2, compute_worker_pb2_grpc, scheduler_pb2_grpc)
from services.runtime.grpc_util import channel
from tests.fake_scheduler import gateway_over_fake

TEXT, MESSAGES, DETOKENIZE = (common_pb2.TOKENIZE_OP_TEXT, common_pb2.TOKENIZE_OP_MESSAGES,
                              common_pb2.TOKENIZE_OP_DETOKENIZE)
BAD = [
    common_pb2.TokenizeRequest(),  # no op
    common_pb2.TokenizeRequest(op=77),
    common_pb2.TokenizeRequest(op=DETOKENIZE, token_ids=[49152]),  # past the vocabulary
    common_pb2.TokenizeRequest(op=DETOKENIZE, token_ids=[1, 2**32 + 1]),
    common_pb2.TokenizeRequest(op=DETOKENIZE, prompt="x"),
    common_pb2.TokenizeRequest(op=TEXT, prompt="x", token_ids=[1]),
    common_pb2.TokenizeRequest(op=MESSAGES),
    common_pb2.TokenizeRequest(op=MESSAGES, messages=[common_pb2.ChatMessage(role="wizard")]),
    common_pb2.TokenizeRequest(op=MESSAGES, messages=[common_pb2.ChatMessage(role="user")]),
]


def _stubs(dep, token=...):
    kw = {} if token is ... else {"token": token}
    return {"scheduler": scheduler_pb2_grpc.SchedulerStub(channel(dep.scheduler_target, **kw)),
            "worker": compute_worker_pb2_grpc.ComputeWorkerStub(
                channel(dep.worker_target, **kw))}


def test_tokenize_rpcs_answer_members_only_and_refuse_bad_requests(deployment):
    good = common_pb2.TokenizeRequest(op=TEXT, prompt="Héllo 🎉")
    for name, stub in _stubs(deployment, token=None).items():
        with pytest.raises(grpc.RpcError) as err:
            stub.Tokenize(good, timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
    answers = []
    for name, stub in _stubs(deployment).items():
        reply = stub.Tokenize(good, timeout=30)
        assert reply.info.vocab_size == 49152 and reply.info.eos_token == "<|im_end|>"
        answers.append(list(reply.token_ids))
        back = stub.Tokenize(common_pb2.TokenizeRequest(op=DETOKENIZE,
                                                        token_ids=reply.token_ids), timeout=30)
        assert back.text == "Héllo 🎉"
        for i, bad in enumerate(BAD):
            with pytest.raises(grpc.RpcError) as err:
                stub.Tokenize(bad, timeout=30)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, i)
    assert answers[0] == answers[1] and answers[0]


def _get(url: str, path: str, key: str | None, body: dict | None = None) -> int:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data, headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_tokenizer_routes_need_an_api_key_as_turns_do():
    with gateway_over_fake("t1:sk-t1") as (_, _fake, gw):
        root = gw.url.removesuffix("/v1")
        routes = [("/tokenizer_info", None), ("/tokenize", {"prompt": "a"}),
                  ("/detokenize", {"tokens": [1]})]
        for path, body in routes:
            for key in (None, "sk-wrong"):
                assert _get(root, path, key, body) == 401, (path, key)
            # the fake scheduler has no Tokenize: past the key check, the scheduler's answer
            assert _get(root, path, "sk-t1", body) == 501, path
