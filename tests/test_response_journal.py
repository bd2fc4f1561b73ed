"""The stored responses' journal (`--state-dir`): a restarted scheduler still continues every
conversation a Responses API client follows by `previous_response_id`. A "restart" is a new
store and journal loaded from the same directory, and once a real scheduler process killed
with -9 and started again."""
from __future__ import annotations

import os
import stat
import threading

import tests.cluster
from scheduler.response_journal import FILE, NOTE_EVERY, ResponseJournal
from scheduler.response_store import ResponseStore
from scheduler.service import _record, _restored
from services.runtime.gen import common_pb2, scheduler_pb2
from services.runtime.grpc_util import channel
from services.runtime.gen.scheduler_pb2_grpc import SchedulerStub
from tests.test_membership import cluster  # noqa: F401 (a fixture)

TTL = 3600.0


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def message(rid: str, previous: str = "", tenant: str = "alice", text: str = "hi"):
    return scheduler_pb2.StoredResponse(
        tenant=tenant, id=rid, previous_id=previous,
        messages=[common_pb2.ChatMessage(role="user", content=text)],
        output=f"answer to {text}")


def started(directory, wall: Clock, max_bytes: int = 1 << 20, **journal_args):
    """A store (its clock: `wall` minus a constant, as a monotonic clock is) and its journal."""
    store = ResponseStore(max_bytes, TTL, clock=lambda: wall.now - 1000.0)
    journal = ResponseJournal(str(directory), _restored, wall=wall, **journal_args)
    return store, journal, journal.load(store)


def put(store, journal, msg) -> None:
    record = _record(msg)
    assert store.put(record)
    journal.put(record)


def chain(store, rid: str, tenant: str = "alice") -> list[tuple[str, str]]:
    return [(r.id, r.payload.messages[0].content) for r in store.chain(tenant, rid)]


def test_a_chain_and_its_deletes_outlive_a_restart(tmp_path):
    wall = Clock(1_000_000.0)
    store, journal, restored = started(tmp_path, wall)
    assert restored == 0
    put(store, journal, message("r1", text="My name is Ada. ¿Qué tal? 日本"))
    put(store, journal, message("r2", "r1", text="What is my name?"))
    put(store, journal, message("r3", "r2", text="Bye."))
    put(store, journal, message("b1", tenant="bob"))
    assert store.delete("bob", "b1")
    journal.deleted("bob", "b1")
    journal.close()

    wall.now += 60
    again, journal, restored = started(tmp_path, wall)
    assert restored == 3
    assert chain(again, "r3") == chain(store, "r3")
    assert again.get("alice", "r3").payload == message("r3", "r2", text="Bye.")
    assert again.get("bob", "b1") is None  # deleted stays deleted
    assert again.get("bob", "r1") is None  # and another tenant's id is still a miss
    assert again.bytes == store.bytes
    journal.close()


def test_idle_time_is_kept_and_a_read_renews_it(tmp_path):
    wall = Clock(1_000_000.0)
    store, journal, _ = started(tmp_path, wall)
    put(store, journal, message("old"))
    put(store, journal, message("read"))
    wall.now += TTL * 0.9
    assert store.get("alice", "read")  # renewed: written down, since older than TTL / 8
    lines = (tmp_path / FILE).read_bytes().splitlines()
    wall.now += TTL * NOTE_EVERY / 2
    assert store.get("alice", "read")  # too recent a note to write again
    assert (tmp_path / FILE).read_bytes().splitlines() == lines
    journal.close()

    wall.now += TTL * 0.2  # "old" is idle past the TTL now, "read" is not
    again, journal, restored = started(tmp_path, wall)
    assert restored == 1
    assert again.get("alice", "old") is None and again.get("alice", "read")
    journal.close()


def test_the_byte_bound_applies_again_on_replay_per_tenant(tmp_path):
    wall = Clock(1_000_000.0)
    size = _record(message("a0")).size
    store, journal, _ = started(tmp_path, wall, max_bytes=3 * size)
    for rid in ("a0", "a1", "a2"):
        put(store, journal, message(rid))
        wall.now += 1
    wall.now += TTL * NOTE_EVERY  # (a read is written down once its last note is that old)
    assert store.get("alice", "a0")  # read: a0 is now the most recently used
    put(store, journal, message("a3"))  # a1 gives way
    journal.close()
    again, journal, restored = started(tmp_path, wall, max_bytes=3 * size)
    assert restored == 3 and again.get("alice", "a1") is None
    assert all(again.get("alice", rid) for rid in ("a0", "a2", "a3"))
    journal.close()


def test_compaction_keeps_the_live_responses_in_a_private_file(tmp_path):
    wall = Clock(1_000_000.0)
    state = tmp_path / "state"
    store, journal, _ = started(state, wall, min_compact_bytes=4096)
    for n in range(200):  # each put replaces the last: the live store holds one response
        put(store, journal, message("same", text=f"turn {n} " + "x" * 100))
        for thread in threading.enumerate():  # a rewrite runs off the caller's path: let it
            if thread.name == "responses-journal":  # finish before the next put
                thread.join()
    journal.close()
    # without compaction 200 lines of ~340 bytes (68 KB); compacted, at most 4 KB past one
    assert (state / FILE).stat().st_size < 2 * 4096
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state / FILE).st_mode) == 0o600
    again, journal, restored = started(state, wall)
    assert restored == 1 and again.get("alice", "same").payload.messages[0].content.startswith(
        "turn 199 ")
    journal.close()


def test_damaged_lines_are_skipped(tmp_path):
    wall = Clock(1_000_000.0)
    store, journal, _ = started(tmp_path, wall)
    put(store, journal, message("r1"))
    put(store, journal, message("r2", "r1"))
    journal.close()
    path = tmp_path / FILE
    good = path.read_bytes()
    junk = [b'{"t":1,"r":"not base64!"}\n', b'{"t":1,"r":"AAAA"}\n', b"\xff\xfe\n",
            b'{"t":1,"d":5}\n', b"[" * 100_000 + b"\n", b'{"t":1,"r":"' + good[:30] + b'\n']
    path.write_bytes(b"".join(junk) + good[:-20])  # and the last line cut short by a kill
    again, journal, restored = started(tmp_path, wall)
    assert restored == 1 and again.get("alice", "r1") and again.get("alice", "r2") is None
    journal.close()


def test_a_scheduler_killed_with_9_answers_the_chain_it_stored(cluster, tmp_path,  # noqa: F811
                                                                monkeypatch):
    flags = ["--store", "", "--workers", "", "--state-dir", str(tmp_path / "state")]
    scheduler = cluster("scheduler", *flags).wait()
    stub = SchedulerStub(channel(scheduler.target))
    for rid, previous in (("resp_1", ""), ("resp_2", "resp_1")):
        assert stub.PutResponse(message(rid, previous, text=f"said in {rid}"), timeout=30).stored
    scheduler.proc.kill()  # -9: nothing flushed at exit
    scheduler.proc.wait(30)
    monkeypatch.setattr(tests.cluster, "free_port", lambda: scheduler.port)  # the same address
    cluster("scheduler", *flags).wait()
    reply = stub.GetResponse(scheduler_pb2.GetResponseRequest(
        tenant="alice", id="resp_2", chain=True), timeout=30)
    assert not reply.missing_id
    assert [(r.id, r.messages[0].content) for r in reply.responses] == [
        ("resp_1", "said in resp_1"), ("resp_2", "said in resp_2")]
