"""A scheduler restarted under conversations that send no session id (real processes, the real
model, greedy): its members (two store shards, a worker) register again one by one. Turns that
arrive in the meantime wait for them instead of running over a partial membership: before,
the first turns after the restart were refused (no worker registered yet: UNAVAILABLE, the
gateway's 503), or hashed to the one shard back so far, which holds none of their KV: a
recompute, and a conversation taken for a new one (another session id, its KV left behind)."""
from __future__ import annotations

import random
import threading

import tests.cluster
from services.client.chat_client import ChatClient
from services.runtime.gen import common_pb2, scheduler_pb2
from tests.test_membership import cluster, wait_for  # noqa: F401 (cluster: a fixture)

CONVERSATIONS, ANSWER = 4, 6


def submit(client: ChatClient, prompt: list[int], session: str = "") -> dict:
    out = {"ids": [], "session": "", "recognised": "", "cached": -1}
    for n, event in enumerate(client.stub.SubmitTurn(common_pb2.TurnRequest(
            session_id=session, prompt_token_ids=prompt, max_tokens=ANSWER, ignore_eos=True),
            timeout=300)):
        if n == 0:
            out["session"], out["recognised"] = event.session_id, event.recognised
        out["ids"].extend(event.token_ids)
        if event.HasField("summary"):
            out["cached"] = event.summary.cached_tokens
    return out


def test_turns_right_after_a_scheduler_restart_wait_for_the_members(cluster, tmp_path,  # noqa: F811
                                                                   monkeypatch):
    flags = ["--store", "", "--workers", "", "--heartbeat-s", "1",
             "--state-dir", str(tmp_path / "state")]
    scheduler = cluster("scheduler", *flags).wait()
    member = ["--scheduler", scheduler.target]
    store_a = cluster("store", "--data-dir", str(tmp_path / "a"), *member).wait()
    cluster("store", "--data-dir", str(tmp_path / "b"), *member).wait()
    cluster("worker", "--store", store_a.target, *member).wait()
    client = ChatClient(scheduler.target)

    def stats():
        return client.stub.Stats(scheduler_pb2.SchedulerStatsRequest())

    wait_for(lambda: stats().workers == 1 and stats().stores == 2)
    rng = random.Random(7)
    prompts = [[rng.randrange(100, 40000) for _ in range(24)] for _ in range(CONVERSATIONS)]
    sessions = []
    for c in range(CONVERSATIONS):  # two turns each, then the scheduler restarts
        first = submit(client, prompts[c])
        prompts[c] += first["ids"] + [rng.randrange(100, 40000) for _ in range(8)]
        second = submit(client, prompts[c])
        assert second["session"] == first["session"] and second["recognised"] == "content"
        prompts[c] += second["ids"] + [rng.randrange(100, 40000) for _ in range(8)]
        sessions.append(first["session"])

    scheduler.stop()  # SIGTERM: its journal of conversations is on disk
    monkeypatch.setattr(tests.cluster, "free_port", lambda: scheduler.port)  # the same address
    cluster("scheduler", *flags).wait()
    client = ChatClient(scheduler.target)
    after: dict[int, dict] = {}
    errors: list[BaseException] = []

    def third(c: int) -> None:
        try:
            after[c] = submit(client, prompts[c])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=third, args=(c,)) for c in range(CONVERSATIONS)]
    for t in threads:  # at once: before the members are back
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors  # before: UNAVAILABLE "no compute worker is available"
    for c in range(CONVERSATIONS):
        turn = after[c]
        assert (turn["session"], turn["recognised"]) == (sessions[c], "content"), c
        assert turn["cached"] > 0, c  # its KV found on the shard that holds it
        fresh = submit(client, prompts[c], session=f"ref-{c}")
        assert fresh["cached"] == 0 and fresh["ids"] == turn["ids"], c
