"""The scheduler's recognition step on real TurnRequests and TurnEvent streams (no servers)."""
from __future__ import annotations

from scheduler.conversations import ConversationIndex
from scheduler.recognition import Recognition
from services.runtime.gen import common_pb2


def request(messages, session="", tenant="acme", **fields):
    return common_pb2.TurnRequest(session_id=session, tenant=tenant, messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in messages], **fields)


def answer(*pieces):
    """A worker's event stream: one event per piece of text, then the summary."""
    yield from (common_pb2.TurnEvent(token_ids=[i], text=t) for i, t in enumerate(pieces))
    yield common_pb2.TurnEvent(summary=common_pb2.TurnSummary(completion_tokens=len(pieces)))


def failing(*pieces):
    yield from (common_pb2.TurnEvent(token_ids=[i], text=t) for i, t in enumerate(pieces))
    raise RuntimeError("the worker was lost")


def test_the_answer_as_relayed_is_recorded_and_the_first_event_says_how():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    first = rec.resolve(request([("user", "Hi")]))
    events = list(first.relay(answer("Hel", "lo!")))
    assert (events[0].session_id, events[0].recognised) == (first.session_id, "new")
    assert first.session_id.startswith("acme/c-") and not events[1].recognised
    follow = [("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")]
    second = rec.resolve(request(follow))
    assert (second.session_id, second.recognised) == (first.session_id, "content")
    try:
        list(second.relay(failing("Good")))
    except RuntimeError:
        pass
    # the failed turn recorded nothing: the same history continues the session again
    assert rec.resolve(request(follow)).session_id == first.session_id


def test_explicit_ids_win_and_client_parents_are_dropped():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    named = rec.resolve(request([("user", "Hi")], session="acme/mine",
                                parent_session_id="other-tenant/theirs"))
    assert (named.session_id, named.recognised) == ("acme/mine", "id")
    assert named.request.parent_session_id == ""
    sneaky = rec.resolve(request([("user", "Hi")], parent_session_id="other-tenant/theirs"))
    assert sneaky.recognised == "new" and sneaky.request.parent_session_id == ""


def test_an_unfinished_token_prompt_and_a_disabled_index_start_new_sessions():
    on = Recognition(ConversationIndex(), alive=lambda s: True)
    ids = [on.resolve(common_pb2.TurnRequest(tenant="t", prompt_token_ids=[1, 2])).session_id
           for _ in range(2)]
    assert ids[0] != ids[1]  # the first is still in flight: its history is not recorded yet
    off = Recognition(None, alive=lambda s: True)
    turn = off.resolve(request([("user", "Hi")]))
    list(turn.relay(answer("Hello")))
    assert off.resolve(request([("user", "Hi"), ("assistant", "Hello"), ("user", "x")])) \
        .recognised == "new"


DOCUMENT = "Read the licence below, then answer the question after it. " * 12  # 720 chars


def test_a_first_message_that_begins_as_another_conversations_branches_from_its_kv():
    """vLLM's multi-turn benchmark puts a prefix shared by every conversation inside the first
    user message: the second conversation reads the first one's KV of it (a branch)."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    first = rec.resolve(request([("user", DOCUMENT + "Question one?")]))
    list(first.relay(answer("One.")))
    second = rec.resolve(request([("user", DOCUMENT + "Another question?")]))
    assert (second.recognised, second.request.parent_session_id) == ("branch",
                                                                      first.session_id)
    assert second.session_id != first.session_id
    # a beginning shorter than one chunk is no common prefix; nor is another role's
    short = rec.resolve(request([("user", DOCUMENT[:200] + "Short?")]))
    assert short.recognised == "new" and not short.request.parent_session_id
    other = rec.resolve(request([("system", DOCUMENT + "Question one?")]))
    assert other.recognised == "new"
    # the whole history still continues its own session, never the branch's parent
    list(second.relay(answer("Two.")))
    follow = rec.resolve(request([("user", DOCUMENT + "Another question?"),
                                  ("assistant", "Two."), ("user", "Why?")]))
    assert (follow.session_id, follow.recognised) == (second.session_id, "content")
