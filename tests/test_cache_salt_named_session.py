"""vLLM's cache_salt holds for a named session's own KV too (the live deployment, the `openai`
package): a turn that names a session under another salt, or none, reads nothing of the KV
saved under the first salt, so knowing a conversation's id does not let a caller learn, from
`cached_tokens`, how much of a guessed history it shares. Its answer equals a recompute, and
from then on the session is the new salt's. Before, the session's own KV was read whatever
the salt (the index alone was salted)."""
from __future__ import annotations

import uuid

from tests.test_conversations_e2e import chat, client, recompute


def test_a_named_session_under_another_salt_reads_none_of_its_kv(deployment):
    c = client(deployment.gateway_url)
    session, salt, other = f"salted-{uuid.uuid4().hex}", uuid.uuid4().hex, uuid.uuid4().hex
    history = [{"role": "user", "content": "Name a fruit."}]
    answer, _, _, _ = chat(c, history, session=session, salt=salt)
    history += [{"role": "assistant", "content": answer},
                {"role": "user", "content": "And a vegetable?"}]

    for guess in (other, None):  # another salt, then none: nothing of it is read
        text, usage, _, recognised = chat(c, history, session=session, salt=guess)
        assert recognised == "id" and usage.prompt_tokens_details.cached_tokens == 0
        assert text == recompute(c, history)

    text, usage, _, _ = chat(c, history, session=session)  # the last turn saved it unsalted
    assert usage.prompt_tokens_details.cached_tokens > 0
    _, usage, _, _ = chat(c, history, session=session, salt=salt)
    assert usage.prompt_tokens_details.cached_tokens == 0  # the first salt's KV is gone


def test_the_same_salt_goes_on_reading_its_kv(deployment):
    c = client(deployment.gateway_url)
    session, salt = f"salted-{uuid.uuid4().hex}", uuid.uuid4().hex
    history = [{"role": "user", "content": "Name a colour."}]
    answer, first, _, _ = chat(c, history, session=session, salt=salt)
    history += [{"role": "assistant", "content": answer},
                {"role": "user", "content": "And another?"}]
    _, usage, _, _ = chat(c, history, session=session, salt=salt)
    assert usage.prompt_tokens_details.cached_tokens >= first.prompt_tokens
