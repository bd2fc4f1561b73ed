"""Scaling compute and storage at run time: workers and KV store shards join and leave while
conversations run; every turn is answered, and answered right (equal to recomputing it)."""
from __future__ import annotations

import random
import threading
import time

import pytest

from compute_worker.engine import Engine
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from services.client.chat_client import ChatClient
from services.runtime.gen import scheduler_pb2
from tests.cluster import ServiceProcess

SESSIONS, TURNS, ANSWER = 6, 4, 6


def wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.2)


@pytest.fixture
def cluster(tmp_path):
    procs: list[ServiceProcess] = []

    def spawn(kind, *flags):
        procs.append(ServiceProcess(kind, tmp_path, *flags))
        return procs[-1]

    yield spawn
    for p in reversed(procs):
        p.stop()


def test_workers_and_store_shards_join_and_leave_during_a_replay(cluster, tmp_path, smollm):
    # Nothing static: the scheduler starts empty and every member registers itself.
    scheduler = cluster("scheduler", "--store", "", "--workers", "", "--heartbeat-s", "0.5")
    member = ["--scheduler", scheduler.wait().target]
    store_a = cluster("store", "--data-dir", str(tmp_path / "a"), *member).wait()
    worker_1 = cluster("worker", "--store", store_a.target, *member).wait()
    client = ChatClient(scheduler.target)

    def stats():
        return client.stub.Stats(scheduler_pb2.SchedulerStatsRequest())

    wait_for(lambda: stats().workers == 1 and stats().stores == 1)
    records: dict[tuple[int, int], tuple[list[int], list[int], int]] = {}
    errors: list[BaseException] = []

    def conversation(s: int) -> None:
        rng = random.Random(s)
        prompt: list[int] = []
        try:
            for t in range(TURNS):
                prompt = prompt + [rng.randrange(100, 40000) for _ in range(12)]
                result = client.turn(f"conv-{s}", prompt_token_ids=prompt, max_tokens=ANSWER,
                                     ignore_eos=True)
                records[(s, t)] = (prompt, result.token_ids, result.summary.cached_tokens)
                prompt = prompt + result.token_ids
                time.sleep(rng.uniform(0.2, 1.0))  # think time
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(s,)) for s in range(SESSIONS)]
    for t in threads:
        t.start()
    # Scale out compute and storage while the conversations run ...
    worker_2 = cluster("worker", "--store", store_a.target, *member).wait()
    store_b = cluster("store", "--data-dir", str(tmp_path / "b"), *member).wait()
    wait_for(lambda: stats().workers == 2 and stats().stores == 2)
    time.sleep(2)
    # ... then scale in: the first worker and the first shard leave.
    worker_1.stop()
    store_a.stop()
    wait_for(lambda: stats().workers == 1 and stats().stores == 1)
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert len(records) == SESSIONS * TURNS
    assert stats().workers == 1 and worker_2.proc.poll() is None and store_b.proc.poll() is None
    # Every answer equals the one computed from scratch; KV was reused along the way.
    model, tok = smollm
    reference = TurnRunner(Engine(model), make_connector(None, model, "ref", 1), tok)
    from services.runtime.gen import common_pb2

    for (s, t), (prompt, answer, _) in sorted(records.items()):
        expected = [i for ids, _, _ in reference.run(common_pb2.TurnRequest(
            session_id=f"ref-{s}-{t}", prompt_token_ids=prompt, max_tokens=ANSWER,
            ignore_eos=True)) for i in ids]
        assert answer == expected, (s, t)
    assert sum(1 for _, _, cached in records.values() if cached > 0) >= SESSIONS
