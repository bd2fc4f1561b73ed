"""Faults during a live turn: the client sees every token exactly once, and the right ones."""
from __future__ import annotations

import os
import signal
import time

from services.client.chat_client import ChatClient
from services.runtime.gen import common_pb2, scheduler_pb2
from bench.chaos.procs import find_descendant

PROMPT = [{"role": "user", "content": "Count slowly from one to forty, in words."}]


def test_killed_engine_actor_mid_decode_reruns_without_duplicates(deployment):
    client = ChatClient(deployment.scheduler_target)
    reference = client.turn("actor-ref", PROMPT, max_tokens=40, ignore_eos=True)
    worker = dict(deployment.procs)["worker"]
    request = common_pb2.TurnRequest(
        session_id="actor-kill", max_tokens=40, ignore_eos=True,
        messages=[common_pb2.ChatMessage(**m) for m in PROMPT])
    got, killed, summary = [], False, None
    for event in client.stub.SubmitTurn(request, timeout=300):
        got += event.token_ids
        if len(got) >= 5 and not killed:
            actor = find_descendant(worker.pid, "EngineHost")
            assert actor is not None, "no Ray actor process found under the worker"
            os.kill(actor, signal.SIGKILL)
            killed = True
        if event.HasField("summary"):
            summary = event.summary
    assert killed and summary is not None
    assert got == reference.token_ids  # nothing lost, nothing duplicated, nothing different
    assert summary.completion_tokens == 40
    stats = client.stub.Stats(scheduler_pb2.SchedulerStatsRequest())
    assert stats.turns_rerun >= 1  # the turn really was re-run after the kill
    # The restarted actor keeps serving.
    deadline = time.monotonic() + 60
    after = client.turn("actor-after", [{"role": "user", "content": "Hi"}], max_tokens=3)
    assert after.summary.completion_tokens >= 1 and time.monotonic() < deadline
