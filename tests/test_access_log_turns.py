"""A turn's access log line (the live deployment's gateway log, as an operator reads it) says
how its conversation was found, which session it ran in as a digest that is the same for each
turn of one conversation, and how much of the prompt came from cache; never the session's id."""
from __future__ import annotations

import json
import os
import re
import time
import uuid

from tests.test_gateway_openai import MODEL, client

LINE = re.compile(r"POST /v1/chat/completions 200 [\d.]+ ms (\w+) session=([0-9a-f]{8}) "
                  r"cached=(\d+)/(\d+)")


def _turn_lines(deployment, call) -> list[tuple[str, str, int, int]]:
    """(recognised, session digest, cached, prompt) of the turn lines `call()` logged."""
    path = os.path.join(deployment.data_dir, "logs", "gateway.log")
    before = os.path.getsize(path)
    reply = call()
    for _ in range(50):  # the line is written as the request ends, just after the reply
        with open(path, errors="replace") as fh:
            fh.seek(before)
            messages = [json.loads(line)["message"] for line in fh.read().splitlines()
                        if line.endswith("}")]  # (a line being written: next look)
        found = [m.groups() for m in map(LINE.fullmatch, messages) if m]
        if found:
            break
        time.sleep(0.1)
    assert len(found) == 1, found
    recognised, session, cached, prompt = found[0]
    assert (int(cached), int(prompt)) == (reply.usage.prompt_tokens_details.cached_tokens,
                                          reply.usage.prompt_tokens)
    return [(recognised, session, int(cached), int(prompt))]


def test_a_conversations_turns_share_a_digest_and_log_their_cache(deployment):
    c = client(deployment.gateway_url)
    messages = [{"role": "user", "content": f"Say hello to {uuid.uuid4().hex[:8]}."}]
    replies = []

    def say():
        replies.append(c.chat.completions.create(model=MODEL, messages=messages))
        return replies[-1]

    [(first, digest, cached, _)] = _turn_lines(deployment, say)
    assert first == "new" and cached == 0
    messages += [{"role": "assistant", "content": replies[-1].choices[0].message.content},
                 {"role": "user", "content": "Thanks."}]
    [(second, again, cached, _)] = _turn_lines(deployment, say)
    assert second == "content" and again == digest and cached > 0


def test_a_named_session_is_logged_by_digest_only(deployment):
    name = f"private-conversation-{uuid.uuid4().hex}"
    c = client(deployment.gateway_url)
    [(recognised, digest, _, _)] = _turn_lines(deployment, lambda: c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi."}], max_tokens=2,
        extra_headers={"X-Session-Id": name}))
    assert recognised == "id" and digest not in name
    with open(os.path.join(deployment.data_dir, "logs", "gateway.log"), errors="replace") as fh:
        assert name not in fh.read()
