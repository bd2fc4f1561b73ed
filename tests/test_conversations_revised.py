"""A history that extends a session's last prompt with another spelling of our answer.

inference-perf and guidellm build a raw multi-turn history as `prompt + " " + answer + " " +
question`: the recorded `prompt + answer` is no prefix of it, so each turn used to branch into a
new session holding a whole new copy of the history's KV (and the eviction policy saw a new
one-turn session every turn). Such a turn now continues the session (`revised`); a regenerated
answer still branches, and a branch reads all of the prompt it shares. Real TurnRequests and
TurnEvent streams through the scheduler's recognition step, and the index alone."""
from __future__ import annotations

from scheduler.conversation_journal import ConversationJournal
from scheduler.conversation_keys import TEXT_CHUNK
from scheduler.conversations import ConversationIndex
from scheduler.recognition import Recognition
from services.runtime.gen import common_pb2

SYSTEM = "".join(f"Rule {i}: answer briefly and politely, in plain words.\n" for i in range(9))


def request(tenant="acme", session="", messages=(), **fields):
    return common_pb2.TurnRequest(tenant=tenant, session_id=session, messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in messages], **fields)


def run(rec, answer="", **fields):
    """Resolve a turn and relay a worker's answer through it: (turn, its first event)."""
    turn = rec.resolve(request(**fields))
    events = [common_pb2.TurnEvent(token_ids=[7], text=answer),
              common_pb2.TurnEvent(summary=common_pb2.TurnSummary(completion_tokens=1))]
    first = list(turn.relay(iter(events)))[0]
    return turn, first


def test_a_raw_history_joined_with_spaces_continues_its_session():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    prompt = SYSTEM + "Q1: what is a planet?"
    one, first = run(rec, "A planet orbits a star.", raw_prompt=prompt)
    assert first.recognised == "new"
    prompt += " A planet orbits a star. Q2: and a moon?"  # inference-perf's join
    two, first = run(rec, "A moon orbits a planet.", raw_prompt=prompt)
    assert (two.session_id, first.recognised) == (one.session_id, "revised")
    assert two.request.parent_session_id == ""  # its own KV: the worker reuses the prompt
    prompt += " A moon orbits a planet. Q3: and a comet?"
    three, first = run(rec, "Ice.", raw_prompt=prompt)
    assert (three.session_id, first.recognised) == (one.session_id, "revised")
    # resent exactly as relayed, it is plain content
    four, first = run(rec, "x", raw_prompt=prompt + "Ice. Q4?")
    assert (four.session_id, first.recognised) == (one.session_id, "content")


def test_a_regenerated_answer_branches_and_both_answers_live_on():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    prompt = SYSTEM + "Q1?"
    one, _ = run(rec, "First answer.", raw_prompt=prompt)
    again, first = run(rec, "Second answer.", raw_prompt=prompt)  # regenerate: the prompt again
    assert (first.recognised, again.request.parent_session_id) == ("branch", one.session_id)
    # an answer replaced by one no longer than it (an edit in place) branches too
    edit, first = run(rec, "", raw_prompt=prompt + "First answeR.")
    assert first.recognised == "branch"
    for turn, answer in ((one, "First answer."), (again, "Second answer.")):
        cont = rec.resolve(request(raw_prompt=prompt + answer + " Q2?"))
        assert (cont.session_id, cont.recognised) == (turn.session_id, "content")
        cont.relay(iter(())).close()


def test_a_repeated_prompt_branches_from_its_own_session_with_all_of_its_prompt():
    """A = S + a, B = S + b (S longer than a chunk, A and B not chunk-aligned): A sent again
    used to branch from B, which recorded S's chunk boundaries last, sharing only S."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    a, _ = run(rec, "Answer a.", raw_prompt=SYSTEM + "Question a?")
    b, first = run(rec, "Answer b.", raw_prompt=SYSTEM + "Question b?")
    assert (first.recognised, b.request.parent_session_id) == ("branch", a.session_id)
    again, first = run(rec, "Answer a.", raw_prompt=SYSTEM + "Question a?")
    assert (first.recognised, again.request.parent_session_id) == ("branch", a.session_id)


def test_a_short_prompt_sent_again_reads_it():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    short = "Say hi."
    assert len(short) < TEXT_CHUNK
    one, _ = run(rec, "Hi!", raw_prompt=short)
    again, first = run(rec, "Hi!", raw_prompt=short)
    assert (first.recognised, again.request.parent_session_id) == ("branch", one.session_id)
    on, first = run(rec, "", raw_prompt=short + " Hi! And more?")
    assert (on.session_id, first.recognised) in {(one.session_id, "revised"),
                                                 (again.session_id, "revised")}


def test_chat_with_an_edited_answer_and_a_new_question_is_revised():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    history = [("system", "Be brief."), ("user", "Name a colour.")]
    one, _ = run(rec, "Blue.", messages=history)
    edited = history + [("assistant", "Blue, as the sky."), ("user", "Another?")]
    two, first = run(rec, "Red.", messages=edited)
    assert (two.session_id, first.recognised) == (one.session_id, "revised")
    # the same number of messages with another last answer (a prefilled one): a branch
    prefill = edited + [("assistant", "Green")]
    three = rec.resolve(request(messages=prefill, continue_final_message=True))
    assert (three.recognised, three.request.parent_session_id) == ("branch", one.session_id)
    three.relay(iter(())).close()
    other = rec.resolve(request(messages=edited[:-1]))  # the edit alone, no new question
    assert other.recognised == "branch"


def test_busy_or_named_sessions_are_not_revised():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    prompt = SYSTEM + "Q?"
    one, _ = run(rec, "A.", raw_prompt=prompt)
    busy = rec.resolve(request(raw_prompt=prompt + " A. Next?"))
    assert busy.recognised == "revised"
    other = rec.resolve(request(raw_prompt=prompt + " A. Next?"))  # the first is running
    assert (other.recognised, other.request.parent_session_id) == ("branch", one.session_id)
    named, _ = run(rec, "A.", session="acme/mine", raw_prompt=SYSTEM + "Named?")
    unnamed = rec.resolve(request(raw_prompt=SYSTEM + "Named? A. Next?"))
    assert (unnamed.recognised, unnamed.request.parent_session_id) == ("branch", "acme/mine")


def test_prompts_are_journaled_and_forgetting_leaves_nothing(tmp_path):
    index = ConversationIndex()
    journal = ConversationJournal(str(tmp_path))
    journal.load(index)
    rec = Recognition(index, alive=lambda s: True, journal=journal)
    one, _ = run(rec, "Hello.", raw_prompt=SYSTEM + "Hi?")
    chat, _ = run(rec, "Blue.", messages=[("user", "Name a colour.")])
    journal.close()
    restored = ConversationIndex()
    ConversationJournal(str(tmp_path)).load(restored)
    again = Recognition(restored, alive=lambda s: True)
    turn = again.resolve(request(raw_prompt=SYSTEM + "Hi? Hello. More?"))
    assert (turn.session_id, turn.recognised) == (one.session_id, "revised")
    turn = again.resolve(request(messages=[("user", "Name a colour."), ("assistant", "Blue!"),
                                           ("user", "More?")]))
    assert (turn.session_id, turn.recognised) == (chat.session_id, "revised")
    for session in (one.session_id, chat.session_id):
        restored.abandon(session)
        assert restored.forget(session)
    assert (restored._keys, restored._heads, restored._prompts, restored._lengths,
            restored._trims) == ({}, {}, {}, {}, {})


def test_a_regenerated_answer_deep_in_a_conversation_never_revises_a_shallower_session():
    """Open WebUI's regenerate, after an earlier regenerate of the first answer: the old
    one-turn session's prompt (the first message) is extended too, and it used to be revised
    (40 of 191 tokens reused); the turn branches from the conversation's own session."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    first = [("system", SYSTEM), ("user", "Q1?")]
    old, _ = run(rec, "A1.", messages=first)
    again, how = run(rec, "A1 again.", messages=first)  # regenerate turn 1
    assert (how.recognised, again.request.parent_session_id) == ("branch", old.session_id)
    history = first + [("assistant", "A1 again."), ("user", "Q2?")]
    two, how = run(rec, "A2.", messages=history)
    assert (two.session_id, how.recognised) == (again.session_id, "content")
    history += [("assistant", "A2."), ("user", "Q3?")]
    three, how = run(rec, "A3.", messages=history)
    assert (three.session_id, how.recognised) == (again.session_id, "content")
    regenerated = rec.resolve(request(messages=history))  # turn 3 again, the same request
    assert (regenerated.recognised, regenerated.request.parent_session_id) == \
        ("branch", again.session_id)
    regenerated.relay(iter(())).close()
    # and a turn after a continued answer the client merged (Stop, Continue): it extends the
    # conversation's last prompt, deeper than anything else: revised there
    merged = history + [("assistant", "A3. And more."), ("user", "Q4?")]
    four = rec.resolve(request(messages=merged))
    assert (four.session_id, four.recognised) == (again.session_id, "revised")


# aider's every turn: its format rules appended to the user's question, and dropped from that
# question when the next turn sends it back in the history
RULES = "\n\nTo suggest changes to a file you MUST return the entire content.\n\n" \
        "Every *file listing* MUST use this format:\n- First line: the filename"


def test_a_question_sent_back_without_the_reminder_appended_to_it_is_revised():
    """aider: each turn used to branch (a new session, a whole new copy of the KV) since its
    previous question comes back without the rules; it now goes on in its session."""
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    stem = [("system", SYSTEM), ("user", "Files: hello.py"), ("assistant", "Ok.")]
    one, first = run(rec, "Done one.", messages=stem + [("user", "Add a docstring." + RULES)])
    assert first.recognised == "new"
    history = stem + [("user", "Add a docstring."), ("assistant", "Done one.")]
    two, first = run(rec, "Done two.", messages=history + [("user", "Rename it." + RULES)])
    assert (two.session_id, first.recognised) == (one.session_id, "revised")
    history += [("user", "Rename it."), ("assistant", "Done two.")]
    three, first = run(rec, "x", messages=history + [("user", "Now a test." + RULES)])
    assert (three.session_id, first.recognised) == (one.session_id, "revised")


def test_a_question_cut_elsewhere_or_another_conversations_is_a_branch():
    rec = Recognition(ConversationIndex(), alive=lambda s: True)
    stem = [("system", SYSTEM)]
    one, _ = run(rec, "Done.", messages=stem + [("user", "Add a docstring." + RULES)])
    # another conversation sharing the system prompt, longer: it is not the first one's
    other = stem + [("user", "Something else."), ("assistant", "Ok."), ("user", "More" + RULES)]
    turn, first = run(rec, "x", messages=other)
    assert (first.recognised, turn.request.parent_session_id) == ("branch", one.session_id)
    # the question cut mid-paragraph, not where a paragraph ends
    cut = stem + [("user", "Add a doc"), ("assistant", "Done."), ("user", "More?")]
    turn, first = run(rec, "x", messages=cut)
    assert first.recognised == "branch" and turn.session_id != one.session_id
    # the question trimmed and sent again with no answer after it: an edit, a branch
    edit = rec.resolve(request(messages=stem + [("user", "Add a docstring.")]))
    assert edit.recognised == "branch"
    edit.relay(iter(())).close()


def test_the_trimmed_prompts_survive_the_journal(tmp_path):
    index = ConversationIndex()
    journal = ConversationJournal(str(tmp_path))
    journal.load(index)
    rec = Recognition(index, alive=lambda s: True, journal=journal)
    one, _ = run(rec, "Done.", messages=[("system", SYSTEM), ("user", "Add it." + RULES)])
    journal.close()
    restored = ConversationIndex()
    ConversationJournal(str(tmp_path)).load(restored)
    turn = Recognition(restored, alive=lambda s: True).resolve(request(messages=[
        ("system", SYSTEM), ("user", "Add it."), ("assistant", "Done."), ("user", "Next.")]))
    assert (turn.session_id, turn.recognised) == (one.session_id, "revised")
