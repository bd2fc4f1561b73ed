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


def test_a_turn_stopped_after_its_first_event_is_recorded_without_its_answer():
    """The worker keeps a stopped turn's prompt KV once it was computed (its first event):
    the prompt is recorded, so the next turn, with the partial answer or without, continues
    the session; a turn stopped before any event recorded nothing."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    history = [("user", "Tell me a long story.")]
    stopped = rec.resolve(request(history))
    relay = stopped.relay(answer("Once", " upon"))
    next(relay)
    relay.close()  # the client hung up (gRPC closes the scheduler's generator)
    for follow in ([*history, ("assistant", "Once"), ("user", "Shorter.")],
                   [*history, ("user", "Shorter.")]):
        turn = rec.resolve(request(follow))
        assert (turn.session_id, turn.recognised) == (stopped.session_id, "content")
        list(turn.relay(iter(())))  # (no event: nothing recorded, no longer in flight)
    early = rec.resolve(request([("user", "Another story.")]))
    list(early.relay(iter(())))  # ended before its first event
    again = rec.resolve(request([("user", "Another story."), ("user", "Shorter.")]))
    assert again.recognised == "new" and again.session_id != early.session_id


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


def test_a_named_session_with_no_kv_reads_a_common_beginning_and_is_never_continued():
    """Clients that name every conversation (X-Session-Id) and open each with one system
    prompt: a new conversation's first turn reads it from another's KV."""
    held = set()  # sessions the store holds KV of
    rec = Recognition(ConversationIndex(), alive=lambda s: s in held)
    first = rec.resolve(request([("user", DOCUMENT + "Question one?")], session="acme/u1"))
    assert (first.session_id, first.recognised) == ("acme/u1", "id")
    assert not first.request.parent_session_id  # nothing recorded yet to read from
    list(first.relay(answer("One.")))
    held.add("acme/u1")
    second = rec.resolve(request([("user", DOCUMENT + "Question two?")], session="acme/u2"))
    assert (second.session_id, second.recognised) == ("acme/u2", "id")
    assert second.request.parent_session_id == "acme/u1"  # u2 holds no KV: u1's beginning
    list(second.relay(answer("Two.")))
    held.add("acme/u2")
    # once it holds KV of its own, its turns read their own
    again = rec.resolve(request([("user", DOCUMENT + "Question two?"), ("assistant", "Two."),
                                 ("user", "More?")], session="acme/u2"))
    assert not again.request.parent_session_id
    # a turn without an id never continues a named session: its client may send any time
    stranger = rec.resolve(request([("user", DOCUMENT + "Question one?"),
                                    ("assistant", "One."), ("user", "Next?")]))
    assert stranger.session_id not in ("acme/u1", "acme/u2")
    assert (stranger.recognised, stranger.request.parent_session_id) == ("branch", "acme/u1")
    # another tenant's named session reads nothing of acme's
    other = rec.resolve(request([("user", DOCUMENT + "Question one?")], session="evil/u1",
                                tenant="evil"))
    assert not other.request.parent_session_id
    # and a client never names the parent itself
    forged = rec.resolve(request([("user", "hi")], session="acme/u3",
                                 parent_session_id="acme/u1"))
    assert not forged.request.parent_session_id


def test_a_cache_salt_keeps_kv_among_turns_with_the_same_salt():
    """vLLM's cache_salt: conversations share KV only with the same salt (and tenant)."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    first = rec.resolve(request([("user", DOCUMENT + "Q?")], cache_salt="alice"))
    list(first.relay(answer("A.")))
    follow = [("user", DOCUMENT + "Q?"), ("assistant", "A."), ("user", "More?")]
    assert rec.resolve(request(follow, cache_salt="bob")).recognised == "new"
    assert rec.resolve(request(follow)).recognised == "new"  # unsalted is a salt of its own
    same = rec.resolve(request(follow, cache_salt="alice"))
    assert (same.session_id, same.recognised) == (first.session_id, "content")
    named = rec.resolve(request([("user", DOCUMENT + "Other?")], session="acme/n",
                                cache_salt="bob"))
    assert not named.request.parent_session_id  # no branch into alice's KV either


def test_the_scheduler_refuses_a_cache_salt_longer_than_a_session_id():
    from scheduler.validation import turn_problem

    ok = request([("user", "hi")], cache_salt="s" * 256)
    assert turn_problem(ok, 0) is None
    assert turn_problem(request([("user", "hi")], cache_salt="s" * 257), 0).startswith(
        "cache_salt is longer than 256 bytes")
