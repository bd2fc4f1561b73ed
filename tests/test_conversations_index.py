"""The conversation keys and index, pure: matching rules, bounds, expiry, forgetting."""
from __future__ import annotations

import itertools
import threading

from scheduler.conversation_keys import DIGEST_BYTES, prefix_keys
from scheduler.conversations import BRANCH, CONTENT, NEW, ConversationIndex

SYS = ("system", "Be brief.")


def names():
    counter = itertools.count()
    return lambda: f"s{next(counter)}"


def test_keys_chain_normalise_and_separate_tenants():
    a = prefix_keys("t", [SYS, ("user", "hi")])
    assert len(a) == 3 and all(len(k) == DIGEST_BYTES for k in a) and len(set(a)) == 3
    assert prefix_keys("t", [("developer", "  Be brief.\n"), ("USER", "hi ")]) == a
    assert prefix_keys("u", [SYS, ("user", "hi")])[1:] != a[1:]  # never across tenants
    assert prefix_keys("t", [SYS, ("user", "hi!")])[:2] == a[:2]  # a chain: prefixes agree
    assert prefix_keys("t", [("user", "Be brief."), ("user", "hi")])[1] != a[1]  # roles count
    # length prefixes: moving text between role and content never collides
    assert prefix_keys("t", [("user", "ab")])[1] != prefix_keys("t", [("usera", "b")])[1]


def history(*texts):
    """Alternating user/assistant messages after the system prompt."""
    roles = itertools.cycle(["user", "assistant"])
    return [SYS] + [(next(roles), t) for t in texts]


def keys(*texts, tenant="t"):
    return prefix_keys(tenant, history(*texts))


def test_linear_conversation_continues_its_session():
    index, new = ConversationIndex(), names()
    first = index.resolve(keys("q1"), new, 0.0)
    assert (first.recognised, first.parent) == (NEW, "")
    index.record(first.session, keys("q1", "a1"), 1.0)
    second = index.resolve(keys("q1", "a1", "q2"), new, 2.0)
    assert (second.recognised, second.session) == (CONTENT, first.session)
    index.record(second.session, keys("q1", "a1", "q2", "a2"), 3.0)
    assert index.resolve(keys("q1", "a1", "q2", "a2", "q3"), new, 4.0).session == first.session


def test_regenerate_edit_and_trim_branch_from_the_matched_session():
    index, new = ConversationIndex(), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    s2 = index.resolve(keys("q1", "a1", "q2"), new, 0).session
    index.record(s2, keys("q1", "a1", "q2", "a2"), 0)
    regenerate = index.resolve(keys("q1", "a1", "q2"), new, 0)  # the last answer replaced
    assert (regenerate.recognised, regenerate.parent) == (BRANCH, s)
    assert regenerate.session != s
    index.record(regenerate.session, keys("q1", "a1", "q2", "a2-bis"), 0)
    # both tails live on: each continues its own session
    assert index.resolve(keys("q1", "a1", "q2", "a2", "q3"), new, 0).session == s
    assert index.resolve(keys("q1", "a1", "q2", "a2-bis", "q3"), new, 0).session == \
        regenerate.session
    edited = index.resolve(keys("q1", "a1", "q2 edited"), new, 0)
    assert edited.recognised == BRANCH and edited.parent in (s, regenerate.session)
    trimmed = index.resolve(prefix_keys("t", [SYS, ("user", "q2")]), new, 0)
    assert trimmed.recognised == BRANCH  # only the system prompt matched


def test_a_session_in_flight_is_branched_from_not_continued():
    index, new = ConversationIndex(), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    one = index.resolve(keys("q1", "a1", "q2"), new, 0)
    other = index.resolve(keys("q1", "a1", "q2"), new, 0)  # same history, s is busy
    assert (one.recognised, other.recognised, other.parent) == (CONTENT, BRANCH, s)
    index.abandon(one.session)  # failed: nothing recorded, s is idle again
    assert index.resolve(keys("q1", "a1", "q2"), new, 0).recognised == CONTENT


def test_a_failed_new_session_is_dropped():
    index, new = ConversationIndex(), names()
    m = index.resolve(keys("q1"), new, 0)
    assert len(index) == 1
    index.abandon(m.session)
    assert len(index) == 0 and index.resolve(keys("q1"), new, 0).recognised == NEW


def test_tenants_never_match():
    index, new = ConversationIndex(), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    assert index.resolve(keys("q1", "a1", "q2", tenant="other"), new, 0).recognised == NEW


def test_ttl_expires_idle_sessions_but_not_busy_ones():
    index, new = ConversationIndex(ttl_s=100), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    busy = index.resolve(keys("x"), new, 0).session  # in flight for long
    assert index.resolve(keys("q1", "a1", "q2"), new, 99).session == s
    index.record(s, keys("q1", "a1", "q2", "a2"), 99)
    assert index.resolve(keys("q1", "a1", "q2", "a2", "q3"), new, 250).recognised == NEW
    index.record(busy, keys("x", "y"), 250)
    assert index.resolve(keys("x", "y", "z"), new, 251).session == busy


def test_size_is_bounded_least_recently_used_first():
    index, new = ConversationIndex(max_keys=8), names()
    sessions = []
    for i in range(5):  # 2 keys each (question, answer) and the system prompt's, shared
        s = index.resolve(keys(f"q{i}"), new, i).session
        index.record(s, keys(f"q{i}", f"a{i}"), i)
        sessions.append(s)
    assert index.keys_held <= 8
    assert index.resolve(keys("q0", "a0", "more"), new, 9).recognised == BRANCH  # system only
    assert index.resolve(keys("q4", "a4", "more"), new, 9).session == sessions[4]


def test_sessions_reported_gone_are_forgotten():
    index, new = ConversationIndex(grace_s=5), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    gone = {s}
    alive = lambda session: session not in gone  # noqa: E731
    # within the grace period the store may not have announced the KV yet
    assert index.resolve(keys("q1", "a1", "q2"), new, 1, alive).session == s
    index.record(s, keys("q1", "a1", "q2", "a2"), 1)
    assert index.resolve(keys("q1", "a1", "q2", "a2", "q3"), new, 10, alive).recognised == NEW
    assert s not in {index.resolve(keys("q1", "a1", "q2"), new, 11).parent}
    t = index.resolve(keys("r1"), new, 20).session
    index.record(t, keys("r1", "b1"), 20)
    index.forget(t)
    assert index.resolve(keys("r1", "b1", "r2"), new, 21).recognised != CONTENT


def test_concurrent_resolves_never_continue_one_session_twice():
    index, new = ConversationIndex(), names()
    s = index.resolve(keys("q1"), new, 0).session
    index.record(s, keys("q1", "a1"), 0)
    got, barrier = [], threading.Barrier(8)

    def go():
        barrier.wait()
        got.append(index.resolve(keys("q1", "a1", "q2"), new, 1).recognised)
    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == [BRANCH] * 7 + [CONTENT]


def test_forgetting_a_branch_hands_the_shared_beginning_back_to_its_parent():
    index, new = ConversationIndex(), names()
    a = index.resolve(keys("q1"), new, 0).session
    index.record(a, keys("q1", "a1"), 0)
    b = index.resolve(keys("q1", "other"), new, 0)  # the same system prompt and first question
    assert (b.recognised, b.parent) == (BRANCH, a)
    index.record(b.session, keys("q1", "other", "b1"), 0)
    index.forget(b.session)  # b recorded the shared keys last; a still holds them
    again = index.resolve(keys("q1", "third"), new, 0)
    assert (again.recognised, again.parent) == (BRANCH, a)
    index.forget(a)
    assert index.resolve(keys("q1", "fourth"), new, 0).recognised == NEW
