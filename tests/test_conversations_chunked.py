"""Raw-text and token-id histories: their chunk keys, and continue / branch / new in the index
and through the scheduler's recognition step (real TurnRequests and TurnEvent streams)."""
from __future__ import annotations

import time

from scheduler.conversation_keys import IDS_CHUNK, TEXT_CHUNK, ChunkedHistory, MessageHistory
from scheduler.conversations import ConversationIndex
from scheduler.recognition import Recognition
from services.runtime.gen import common_pb2

FIRST = "".join(f"Line {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(12))


def names():
    n = iter(range(10 ** 6))
    return lambda: f"s{next(n)}"


def test_chunk_keys_are_a_chain_and_heads_are_exact():
    a = ChunkedHistory("t", FIRST)
    assert len(a.keys) == 1 + len(FIRST) // TEXT_CHUNK
    longer = ChunkedHistory("t", FIRST + "more")
    assert longer.keys[:len(a.keys)] == a.keys  # a prefix shares every whole chunk's key
    assert longer.head(len(FIRST)) == a.head(len(FIRST))  # and its exact key
    assert longer.head(len(FIRST) - 1) != a.head(len(FIRST))
    assert a.head(len(FIRST) + 1) is None and a.head(-1) is None
    changed = ChunkedHistory("t", "X" + FIRST[1:])
    assert all(x != y for x, y in zip(changed.keys[1:], a.keys[1:]))  # a chain: all differ


def test_spaces_and_tenants_are_apart():
    text, ids = ChunkedHistory("t", "a" * 300), ChunkedHistory("t", [97] * 300)
    other = ChunkedHistory("u", "a" * 300)
    assert len({text.keys[1], ids.keys[1], other.keys[1]}) == 3
    assert len({text.keys[0], ids.keys[0], other.keys[0], MessageHistory("t", []).keys[0]}) == 4


def test_answer_extends_the_history_by_text_or_by_ids():
    keys, length = ChunkedHistory("t", FIRST).after("An answer.", [5, 6])
    assert length == len(FIRST) + len("An answer.")
    whole = ChunkedHistory("t", FIRST + "An answer.")
    assert keys == whole.keys + [whole.head(length)]
    keys, length = ChunkedHistory("t", list(range(100))).after("ignored", [7, 8])
    assert length == 102 and keys[-1] == ChunkedHistory("t", list(range(100)) + [7, 8]).head(102)


def resolve(index, units, now=0.0, tenant="t"):
    h = ChunkedHistory(tenant, units)
    return h, index.resolve(h.keys, names_, now, head=h.head)


names_ = names()


def finish(index, history, match, answer="", ids=(), now=0.0):
    keys, length = history.after(answer, list(ids))
    index.record(match.session, keys, now, length)


def test_a_history_sent_again_with_more_continues_its_session():
    index = ConversationIndex()
    h, first = resolve(index, "Hi")  # shorter than a chunk: found at k_0
    assert first.recognised == "new"
    finish(index, h, first, " Hello!")
    h, second = resolve(index, "Hi Hello! How are you?")
    assert (second.recognised, second.session) == ("content", first.session)
    finish(index, h, second, " " + FIRST)  # the history now spans chunks
    h, third = resolve(index, "Hi Hello! How are you? " + FIRST + " Bye.")
    assert (third.recognised, third.session) == ("content", first.session)
    finish(index, h, third, "x")
    # an answer trimmed or edited by the client: its recorded text is no prefix -> branch
    h, edited = resolve(index, "Hi Hello! How are you? " + FIRST + " Bye.y")
    assert (edited.recognised, edited.parent) == ("branch", first.session)


def test_same_beginning_branches_and_each_keeps_its_own_tail():
    index = ConversationIndex()
    ha, a = resolve(index, FIRST)
    finish(index, ha, a, "Answer.")
    hb, b = resolve(index, FIRST)  # another client, the same first prompt
    assert (b.recognised, b.parent) == ("branch", a.session)
    finish(index, hb, b, "Answer.")  # greedy: the same answer
    ha, a2 = resolve(index, FIRST + "Answer.Q-a")
    finish(index, ha, a2, "A-a")
    hb, b2 = resolve(index, FIRST + "Answer.Q-b")
    assert {a2.recognised, b2.recognised} == {"content"} and a2.session != b2.session
    finish(index, hb, b2, "A-b")
    for tail in ("a", "b"):  # no thrash: each history still continues its own session
        _, again = resolve(index, FIRST + f"Answer.Q-{tail}A-{tail}next")
        assert again.recognised == "content"
        index.abandon(again.session)


def test_a_busy_session_is_not_continued_and_the_longest_recorded_wins():
    index = ConversationIndex()
    h, a = resolve(index, "Hi")
    finish(index, h, a, "!")
    h2, b = resolve(index, "Hi!")  # continues a; in flight
    _, c = resolve(index, "Hi!x")
    assert b.session == a.session and c.recognised == "new"  # under a chunk: nothing shared
    finish(index, h2, b, "!")  # a's history is now "Hi!!"
    index.abandon(c.session)
    _, d = resolve(index, "Hi!!?")
    assert (d.recognised, d.session) == ("content", a.session)


def test_token_ids_continue_and_branch_by_chunks_of_ids():
    index = ConversationIndex()
    prompt = list(range(1000, 1000 + 2 * IDS_CHUNK + 10))
    h, a = resolve(index, prompt)
    finish(index, h, a, "text is ignored", [1, 2, 3])
    _, cont = resolve(index, prompt + [1, 2, 3, 4])
    assert (cont.recognised, cont.session) == ("content", a.session)
    _, branch = resolve(index, prompt[:IDS_CHUNK + 5] + [9])
    assert (branch.recognised, branch.parent) == ("branch", a.session)
    _, other = resolve(index, prompt + [1, 2, 3, 4], tenant="u")
    assert other.recognised == "new"
    _, as_text = resolve(index, "".join(map(chr, prompt)))
    assert as_text.recognised == "new"


def test_chunk_keys_count_against_the_bound():
    per_session = (len(FIRST) + 3) // TEXT_CHUNK + 1  # its whole chunks' keys and its head
    index = ConversationIndex(max_keys=3 * per_session)
    for i in range(10):
        h, m = resolve(index, f"{i}" + FIRST)
        finish(index, h, m, "ok")
    assert index.keys_held <= index.max_keys and len(index) == 3


def request(tenant="acme", **fields):
    return common_pb2.TurnRequest(tenant=tenant, **fields)


def answer(*pieces):
    yield from (common_pb2.TurnEvent(token_ids=[50 + i], text=t) for i, t in enumerate(pieces))
    yield common_pb2.TurnEvent(summary=common_pb2.TurnSummary(completion_tokens=len(pieces)))


def test_recognition_records_raw_answers_as_relayed_and_ids_as_generated():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    first = rec.resolve(request(raw_prompt=FIRST))
    list(first.relay(answer("Hel", "lo")))
    again = rec.resolve(request(raw_prompt=FIRST + "Hello" + "Next?"))
    assert (again.session_id, again.recognised) == (first.session_id, "content")
    assert again.request.parent_session_id == ""
    branch = rec.resolve(request(raw_prompt=FIRST + "Other"))
    assert branch.recognised == "branch"
    assert branch.request.parent_session_id == first.session_id
    ids = rec.resolve(request(prompt_token_ids=[1, 2, 3]))
    list(ids.relay(answer("a", "b")))
    follow = rec.resolve(request(prompt_token_ids=[1, 2, 3, 50, 51, 9]))
    assert (follow.session_id, follow.recognised) == (ids.session_id, "content")


def test_a_100kb_history_is_recognised_in_a_few_ms():
    index = ConversationIndex()
    history = ("All work and no play makes Jack a dull boy. " * 2300)[:100_000]
    h, m = resolve(index, history)
    finish(index, h, m, "answer")
    start = time.perf_counter()
    h, again = resolve(index, history + "answer" + " one more question")
    finish(index, h, again, "another answer")
    assert again.recognised == "content"
    assert time.perf_counter() - start < 0.02  # ~1 ms measured; 20x headroom for a busy box


def test_many_sessions_at_one_boundary_cost_one_hash_per_recorded_length():
    index = ConversationIndex()
    system_prompt = FIRST[:TEXT_CHUNK]  # one-shot prompts sharing a chunk-long beginning
    for i in range(3000):
        h, m = resolve(index, system_prompt + f"question {i % 1000:03d}-{i}")
        finish(index, h, m, "!")
    h = ChunkedHistory("t", system_prompt + "question 007-7!" + " and then?")
    calls = []
    match = index.resolve(h.keys, names_, 1.0, head=lambda n: calls.append(n) or h.head(n))
    assert match.recognised == "content"
    # one hash per length recorded at that boundary (4 of them), not one per session (3000)
    assert len(calls) <= len({len(f"question {i % 1000:03d}-{i}!") for i in range(3000)}) == 4
