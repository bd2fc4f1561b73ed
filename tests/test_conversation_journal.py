"""The conversation index's journal: a restarted scheduler recognises the conversations it knew.

Real files in a temporary directory, real TurnRequests and TurnEvent streams through the
scheduler's recognition step; a "restart" is a new index and journal loaded from the same
directory. The wall clock is passed in, so ages and expiry are exact."""
from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
import threading

from scheduler.conversation_journal import FILE, ConversationJournal
from scheduler.conversations import ConversationIndex
from scheduler.recognition import Recognition
from services.runtime.cluster_auth import write_token_file
from services.runtime.gen import common_pb2

PROMPT = "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(12))


class Wall:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def started(directory, wall, ttl_s=3600.0, **journal_args):
    """A scheduler's recognition as it starts: its index loaded from `directory`."""
    index = ConversationIndex(ttl_s=ttl_s)
    journal = ConversationJournal(str(directory), clock=wall, wall=wall, **journal_args)
    restored = journal.load(index)
    return Recognition(index, alive=lambda s: True, clock=wall, journal=journal), restored


def chat(*texts):
    roles = ["user", "assistant"] * len(texts)
    return common_pb2.TurnRequest(tenant="acme", messages=[
        common_pb2.ChatMessage(role=r, content=t) for r, t in zip(roles, texts)])


def turn(rec, request, *pieces):
    """One turn resolved and answered; returns it."""
    t = rec.resolve(request)
    events = [common_pb2.TurnEvent(token_ids=[50 + i], text=p) for i, p in enumerate(pieces)]
    events.append(common_pb2.TurnEvent(summary=common_pb2.TurnSummary(
        completion_tokens=len(pieces))))
    list(t.relay(iter(events)))
    return t


def test_a_restarted_scheduler_continues_chat_raw_and_id_conversations(tmp_path):
    wall = Wall()
    rec, restored = started(tmp_path, wall)
    assert restored == 0
    a = turn(rec, chat("Name three rivers."), "Rhine, Danube, Loire.")
    b = turn(rec, common_pb2.TurnRequest(tenant="acme", raw_prompt=PROMPT), "Hel", "lo")
    c = turn(rec, common_pb2.TurnRequest(tenant="acme", prompt_token_ids=[1, 2, 3]), "x", "y")
    rec.journal.close()

    wall.t += 120.0  # the scheduler was down two minutes
    again, restored = started(tmp_path, wall)
    assert restored == 3
    a2 = again.resolve(chat("Name three rivers.", "Rhine, Danube, Loire.", "Which is longest?"))
    b2 = again.resolve(common_pb2.TurnRequest(tenant="acme", raw_prompt=PROMPT + "Hello More?"))
    c2 = again.resolve(common_pb2.TurnRequest(tenant="acme", prompt_token_ids=[1, 2, 3, 50, 51, 7]))
    for old, new in ((a, a2), (b, b2), (c, c2)):
        assert (new.session_id, new.recognised) == (old.session_id, "content")
    # another tenant sending the same history is not recognised, after a restart either
    other = chat("Name three rivers.", "Rhine, Danube, Loire.", "Which is longest?")
    other.tenant = "globex"
    assert again.resolve(other).recognised == "new"


def test_a_conversation_its_client_ended_stays_ended_across_a_restart(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    ended = turn(rec, chat("Name three rivers."), "Rhine, Danube, Loire.")
    kept = turn(rec, chat("Name three lakes."), "Garda, Como, Maggiore.")
    assert rec.end(ended.session_id) and not rec.end(ended.session_id)  # known once
    assert rec.resolve(chat("Name three rivers.", "Rhine, Danube, Loire.", "Why?")).recognised \
        == "new"
    rec.journal.close()

    again, restored = started(tmp_path, wall)
    assert restored == 1
    assert again.resolve(chat("Name three rivers.", "Rhine, Danube, Loire.", "Why?")).recognised \
        == "new"
    assert again.resolve(chat("Name three lakes.", "Garda, Como, Maggiore.", "Why?")) \
        .session_id == kept.session_id
    assert again.end(kept.session_id)
    again.journal.close()
    third, restored = started(tmp_path, wall)
    assert restored == 0


def test_a_branch_keeps_its_parent_across_a_restart(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    first = turn(rec, chat("Hi."), "Hello!")
    branch = turn(rec, chat("Hi.", "Hello!", "Tell me a joke."), "No.")
    follow = turn(rec, chat("Hi.", "Hello!", "Tell me a story."), "Once.")  # same beginning
    assert (follow.recognised, follow.request.parent_session_id) == ("branch", first.session_id)
    assert branch.session_id == first.session_id
    rec.journal.close()

    again, _ = started(tmp_path, wall)
    # the branch's own tail continues it; the common beginning still leads to the parent
    tail = again.resolve(chat("Hi.", "Hello!", "Tell me a story.", "Once.", "More."))
    assert (tail.session_id, tail.recognised) == (follow.session_id, "content")
    again.index.abandon(tail.session_id)
    again.index.forget(follow.session_id)  # its KV gone: the shared prefix goes back to the parent
    fork = again.resolve(chat("Hi.", "Hello!", "Something else."))
    assert (fork.recognised, fork.request.parent_session_id) == ("branch", first.session_id)


def test_ages_carry_over_and_conversations_past_the_ttl_are_not_restored(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path, wall, ttl_s=600.0)
    old = turn(rec, chat("Old question."), "Old answer.")
    wall.t += 500.0
    young = turn(rec, chat("New question."), "New answer.")
    rec.journal.close()

    wall.t += 200.0  # `old` is now 700 s idle, past the 600-s ttl; `young` 200 s
    again, restored = started(tmp_path, wall, ttl_s=600.0)
    assert restored == 1
    assert [(r.session, touched) for r, touched in again.index.recorded()] == \
        [(young.session_id, wall.t - 200.0)]  # its age carried over
    assert again.resolve(chat("Old question.", "Old answer.", "More?")).recognised == "new"
    wall.t += 401.0  # 200 + 401 s idle: past the ttl
    assert again.resolve(chat("New question.", "New answer.", "More?")).recognised == "new"


def test_a_line_cut_short_is_skipped_and_the_rest_restored(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    a = turn(rec, chat("First."), "One.")
    turn(rec, chat("Second."), "Two.")
    rec.journal.close()
    path = tmp_path / FILE
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the process was killed mid-write of the last line
    again, restored = started(tmp_path, wall)
    assert restored == 1
    assert again.resolve(chat("First.", "One.", "Go on.")).session_id == a.session_id
    assert again.resolve(chat("Second.", "Two.", "Go on.")).recognised == "new"


def test_lines_that_are_not_entries_are_skipped_and_the_rest_restored(tmp_path):
    # bytes that are not UTF-8, a JSON list, hex that is not, nesting 100,000 deep (a
    # RecursionError, which stopped the start before)
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    a = turn(rec, chat("First."), "One.")
    rec.journal.close()
    path = tmp_path / FILE
    junk = [b"\xff\xfe\n", b"[1, 2]\n", b'{"t": 1, "s": "x", "k": ["zz"]}\n',
            b"[" * 100_000 + b"]" * 100_000 + b"\n"]
    path.write_bytes(b"".join(junk) + path.read_bytes())
    again, restored = started(tmp_path, wall)
    assert restored == 1
    assert again.resolve(chat("First.", "One.", "Go on.")).session_id == a.session_id


def test_the_file_is_compacted_to_the_live_index_and_stays_private(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path, wall, min_compact_bytes=4096)
    history = ["Start."]
    for i in range(60):  # one conversation of 60 turns: each line repeats the whole path
        t = turn(rec, chat(*history), f"Answer {i}.")
        history += [f"Answer {i}.", f"Question {i}?"]
        wall.t += 1.0
        for thread in threading.enumerate():  # a rewrite runs off the turn's path: let it
            if thread.name == "conversation-journal":  # finish before the next turn
                thread.join()
    rec.journal.close()  # waits for a compaction under way
    path = tmp_path / FILE
    lines = path.read_bytes().splitlines()
    # without compaction 60 lines of up to 120 keys (~120 KB); compacted, a few recent ones
    assert len(lines) < 20 and path.stat().st_size < 3 * 4096 + 4096, len(lines)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not (tmp_path / "conversations.tmp").exists()
    again, restored = started(tmp_path, wall, min_compact_bytes=4096)
    assert restored == 1
    assert again.resolve(chat(*history)).session_id == t.session_id


def test_a_directory_it_makes_is_private(tmp_path):
    wall = Wall()
    rec, _ = started(tmp_path / "state", wall)
    turn(rec, chat("Hi."), "Hello.")
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "state" / FILE).st_mode) == 0o600


def test_a_full_disk_costs_the_journal_not_the_turn(tmp_path, caplog):
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    rec.journal.file._file = open("/dev/full", "ab")  # a real device whose every write is ENOSPC
    with caplog.at_level(logging.WARNING, logger="bidaw.scheduler"):
        first = turn(rec, chat("Hi."), "Hello.")
        second = turn(rec, chat("Hi.", "Hello.", "Bye."), "Bye.")
    assert second.session_id == first.session_id  # served and recognised in memory
    warnings = [r for r in caplog.records if "conversation journal" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


def test_a_state_dir_that_cannot_be_one_is_refused_by_name(tmp_path):
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("a file")
    token = str(tmp_path / "token")
    write_token_file(token)
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "scheduler", "--listen",
         "127.0.0.1:0", "--state-dir", str(not_a_dir), "--cluster-token-file", token],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done
    assert (f"bidaw serve scheduler: --state-dir {not_a_dir}: exists and is not a directory"
            in done.stderr), done.stderr
    assert "Traceback" not in done.stderr and not_a_dir.read_text() == "a file"


def test_a_named_session_comes_back_named(tmp_path):
    """After a restart a named session is still only a branch's parent, never continued."""
    wall = Wall()
    rec, _ = started(tmp_path, wall)
    named = chat(PROMPT + "Q1?")
    named.session_id = "acme/u1"
    turn(rec, named, "A1.")
    rec, restored = started(tmp_path, wall)
    assert restored == 1
    follow = rec.resolve(chat(PROMPT + "Q1?", "A1.", "Q2?"))  # no id: not u1's continuation
    assert (follow.recognised, follow.request.parent_session_id) == ("branch", "acme/u1")
    other = chat(PROMPT + "Q9?")
    other.session_id = "acme/u2"
    rec = Recognition(rec.index, alive=lambda s: s == "acme/u1", clock=wall)
    assert rec.resolve(other).request.parent_session_id == "acme/u1"
