"""Conversations recognised by their content through the live deployment (real processes, the
real model, greedy): `openai` clients that send no session id reuse KV as if they had, branches
reuse up to where they diverge, tenants share nothing, and every gateway continues them."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
import uuid

import openai
import pytest

from tests.background_gateway import BackgroundGateway
from services.gateway.config import GatewayConfig
from services.launch.launcher import free_port, wait_http

MODEL = "smollm2-135m"
QUESTIONS = ["Name a fruit.", "What colour is it?", "Where does it grow?", "Thank you."]


def client(base_url: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=300)


def chat(c, messages, session=None, max_tokens=8, stream=False, salt=None):
    """(answer, usage, x-bidaw-session, x-bidaw-session-recognised)."""
    extra = {"extra_headers": {"X-Session-Id": session}} if session else {}
    if salt:
        extra["extra_body"] = {"cache_salt": salt}
    if stream:
        extra["stream_options"] = {"include_usage": True}
    raw = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0, stream=stream,
        **extra)
    if stream:
        chunks = list(raw.parse())
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        usage = chunks[-1].usage
    else:
        reply = raw.parse()
        text, usage = reply.choices[0].message.content, reply.usage
    return text, usage, raw.headers["x-bidaw-session"], raw.headers["x-bidaw-session-recognised"]


def recompute(c, messages, max_tokens=8) -> str:
    """The answer computed from scratch: a fresh named session, salted so that it reads no
    other session's KV either (vLLM's cache_salt)."""
    text, usage, _, _ = chat(c, messages, session=f"recompute-{uuid.uuid4().hex}",
                             max_tokens=max_tokens, salt=uuid.uuid4().hex)
    assert usage.prompt_tokens_details.cached_tokens == 0
    return text


def system(tag: str) -> dict:
    return {"role": "system", "content": f"You are a helpful assistant ({tag})."}


def converse(c, tag, questions=QUESTIONS, session=None, stream_turn=-1):
    """A whole conversation; per turn (answer, usage, session header, recognised)."""
    messages, turns = [system(tag)], []
    for i, question in enumerate(questions):
        messages.append({"role": "user", "content": question})
        turns.append(chat(c, messages, session, stream=i == stream_turn))
        messages.append({"role": "assistant", "content": turns[-1][0]})
    return turns, messages


def test_a_plain_openai_client_reuses_as_much_as_with_a_session_id(deployment):
    c = client(deployment.gateway_url)
    named, _ = converse(c, "linear", session="linear-named")
    plain, _ = converse(c, "linear", stream_turn=2)  # the third turn streamed
    assert [t[0] for t in plain] == [t[0] for t in named]  # the same answers
    assert [t[3] for t in named] == ["id"] * 4 and {t[2] for t in named} == {"linear-named"}
    # its first turn reads the named one's KV of the same messages (a named session is a
    # branch's parent, never continued), then it goes on in its own session
    assert [t[3] for t in plain] == ["branch", "content", "content", "content"]
    assert len({t[2] for t in plain}) == 1 and plain[0][2].startswith("c-")
    assert plain[0][1].prompt_tokens_details.cached_tokens == plain[0][1].prompt_tokens - 1
    for (_, by_id, _, _), (_, by_content, _, _) in zip(named[1:], plain[1:]):
        assert by_id.prompt_tokens_details.cached_tokens > 0
        assert abs(by_content.prompt_tokens_details.cached_tokens
                   - by_id.prompt_tokens_details.cached_tokens) <= 8


def test_regenerate_edit_and_trim_reuse_up_to_the_divergence(deployment):
    c = client(deployment.gateway_url)
    turns, messages = converse(c, "branches", QUESTIONS[:2])
    (_, first, session, _), (answer2, second, _, _) = turns
    asked = messages[:4]  # system, q1, a1, q2: the second turn as the client sent it

    regenerated, usage, branch, how = chat(c, asked)
    assert how == "branch" and branch != session
    assert usage.prompt_tokens_details.cached_tokens == second.prompt_tokens - 1
    assert regenerated == answer2 == recompute(c, asked)

    edited = [asked[0], {"role": "user", "content": "Name a vegetable."}, *asked[2:]]
    text, usage, _, how = chat(c, edited)
    assert how == "branch"
    assert 0 < usage.prompt_tokens_details.cached_tokens < first.prompt_tokens - 3
    assert text == recompute(c, edited)

    trimmed = [asked[0], asked[3], {"role": "assistant", "content": answer2},
               {"role": "user", "content": "Why?"}]
    text, usage, _, how = chat(c, trimmed)
    assert how == "branch"  # only the system prompt matched: its KV is reused
    assert 0 < usage.prompt_tokens_details.cached_tokens < first.prompt_tokens - 3
    assert text == recompute(c, trimmed)


def test_conversations_sharing_a_beginning_keep_their_own_tails(deployment):
    c = client(deployment.gateway_url)
    ask = {"a": ["Name a fruit.", "Is it sweet?", "How do I eat it?"],
           "b": ["Name a fruit.", "Is it expensive?", "Where do I buy it?"]}
    messages = {k: [system("shared")] for k in ask}
    turns = {k: [] for k in ask}
    for i in range(3):  # the two conversations interleaved, turn by turn
        for k in ask:
            messages[k].append({"role": "user", "content": ask[k][i]})
            turns[k].append(chat(c, messages[k]))
            messages[k].append({"role": "assistant", "content": turns[k][-1][0]})
    a, b = turns["a"], turns["b"]
    assert (a[0][3], b[0][3]) == ("new", "branch")
    # b's first turn read the common prefix from a's KV instead of recomputing it
    assert b[0][1].prompt_tokens_details.cached_tokens == b[0][1].prompt_tokens - 1
    for k, own in turns.items():
        assert [t[3] for t in own[1:]] == ["content", "content"]
        for before, after in zip(own, own[1:]):  # all the previous turn stored, no thrash
            assert after[1].prompt_tokens_details.cached_tokens >= \
                before[1].prompt_tokens + before[1].completion_tokens - 2
        assert own[-1][0] == recompute(c, messages[k][:-1])
    assert a[2][2] != b[2][2]


def test_a_first_message_that_begins_as_another_conversations_reuses_its_kv(deployment):
    """vLLM's multi-turn benchmark (common_prefix_num_tokens): a text shared by every
    conversation opens each first user message, before that user's own text."""
    c = client(deployment.gateway_url)
    document = ("The licence grants every person who obtains a copy the right to use, copy, "
                "modify and share it, provided this notice is kept. ") * 6
    first = [{"role": "user", "content": document + "Who may use it?"}]
    _, usage1, session, how1 = chat(c, first)
    second = [{"role": "user", "content": document + "Must the notice be kept?"}]
    text, usage2, branch, how2 = chat(c, second)
    assert (how1, how2) == ("new", "branch") and branch != session
    shared = len(tokenize(deployment, document))
    # the whole shared text, up to the tokens where the two questions begin
    assert shared - 2 <= usage2.prompt_tokens_details.cached_tokens < usage2.prompt_tokens - 3
    assert text == recompute(c, second)


def test_named_users_sharing_a_system_prompt_read_it_from_each_other(deployment):
    """LMCache's multi-round-qa: every user named (x-user-id), each first message opening with
    one system prompt: a new user's first turn reads it from an earlier user's KV. A user's id
    names no conversation (a user may hold several): the conversation is recognised by its
    messages, and the new user's branches from the earlier user's."""
    c = client(deployment.gateway_url)
    shared = "Hi, here's some system prompt: " + "You answer briefly and politely. " * 12
    u1 = [{"role": "user", "content": shared + "For user 1: what is a river?"}]
    raw1 = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=u1, max_tokens=8, temperature=0,
        extra_headers={"x-user-id": f"lmc-{uuid.uuid4().hex}"})
    assert raw1.parse().usage.prompt_tokens_details.cached_tokens == 0
    u2 = [{"role": "user", "content": shared + "For user 2: what is a lake?"}]
    raw2 = c.chat.completions.with_raw_response.create(
        model=MODEL, messages=u2, max_tokens=8, temperature=0,
        extra_headers={"x-user-id": f"lmc-{uuid.uuid4().hex}"})
    reply = raw2.parse()
    assert raw2.headers["x-bidaw-session-recognised"] == "branch"
    tokens = len(tokenize(deployment, shared))
    assert tokens - 2 <= reply.usage.prompt_tokens_details.cached_tokens \
        < reply.usage.prompt_tokens - 3
    assert reply.choices[0].message.content == recompute(c, u2)


def tokenize(deployment, text: str) -> list[int]:
    """The served tokenizer's ids of `text` (vLLM's /tokenize)."""
    url = deployment.gateway_url.removesuffix("/v1") + "/tokenize"
    body = json.dumps({"model": MODEL, "prompt": text}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())["tokens"]


@pytest.fixture(scope="module")
def two_tenants(deployment):
    config = GatewayConfig(listen="127.0.0.1:0", scheduler=deployment.scheduler_target,
                           api_keys="carol:key-carol-123,dave:key-dave-456")
    with BackgroundGateway(config) as gw:
        yield gw


def test_identical_histories_of_two_tenants_share_nothing(two_tenants):
    carol, dave = (client(two_tenants.url, k) for k in ("key-carol-123", "key-dave-456"))
    turns, messages = converse(carol, "tenants", QUESTIONS[:2])
    assert turns[1][1].prompt_tokens_details.cached_tokens > 0
    messages.append({"role": "user", "content": QUESTIONS[2]})
    _, usage, _, how = chat(dave, messages)
    assert how == "new" and usage.prompt_tokens_details.cached_tokens == 0
    _, usage, _, how = chat(carol, messages)
    assert how == "content" and usage.prompt_tokens_details.cached_tokens > 0


def gateway_process(deployment, log_dir) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "serve", "gateway", "--listen",
         f"127.0.0.1:{port}", "--scheduler", deployment.scheduler_target, "--served-model-name",
         MODEL, "--cluster-token-file", deployment.token_file], stdout=open(os.path.join(log_dir, f"gateway-{port}.log"), "ab"),
        stderr=subprocess.STDOUT, start_new_session=True)
    wait_http(f"http://127.0.0.1:{port}/health", 60, alive=lambda: proc.poll() is None)
    return proc, f"http://127.0.0.1:{port}/v1"


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(30)


def test_other_gateways_and_a_restarted_one_continue_the_conversation(deployment, tmp_path):
    messages = [system("replicas"), {"role": "user", "content": QUESTIONS[0]}]
    answers = []
    first, second = gateway_process(deployment, tmp_path), None
    try:
        for i, url in enumerate([deployment.gateway_url, first[1], None]):
            if url is None:  # the replica restarts: a new process, nothing in its memory
                stop(first[0])
                second = gateway_process(deployment, tmp_path)
                url = second[1]
            text, usage, session, how = chat(client(url), messages)
            answers.append((usage, session, how))
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": QUESTIONS[i + 1]}]
    finally:
        for proc in (first[0], second and second[0]):
            if proc is not None and proc.poll() is None:
                stop(proc)
    assert [how for _, _, how in answers] == ["new", "content", "content"]
    assert len({session for _, session, _ in answers}) == 1
    assert all(u.prompt_tokens_details.cached_tokens > 0 for u, _, _ in answers[1:])


def recognised_counts(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {m[0]: float(m[1]) for m in
            re.findall(r'^bidaw_session_recognition_total\{how="(\w+)"\} (\S+)$', text, re.M)}


def test_scheduler_and_gateway_count_how_sessions_were_found(deployment):
    urls = deployment.metrics_urls
    before = {name: recognised_counts(urls[name]) for name in ("scheduler", "gateway")}
    converse(client(deployment.gateway_url), "metrics", QUESTIONS[:2])
    chat(client(deployment.gateway_url), [system("metrics-id"), {"role": "user", "content": "Hi"}],
         session="metrics-named")
    for name in ("scheduler", "gateway"):
        after = recognised_counts(urls[name])
        grew = {how: after.get(how, 0) - before[name].get(how, 0) for how in after}
        assert grew["new"] >= 1 and grew["content"] >= 1 and grew["id"] >= 1, (name, grew)


def test_a_question_sent_back_without_its_appended_rules_goes_on_in_its_session(deployment):
    """aider appends its format rules to the latest question and drops them when it sends that
    question back: each turn used to be a branch, a new session holding a new copy of the
    whole KV; it now goes on in its session, reading all it shares, with the answer a
    recompute gives."""
    c = client(deployment.gateway_url)
    rules = "\n\nAnswer in one short line.\n\nNever use a list."
    history, seen = [system("aider")], []
    for question in ("Name a fruit.", "And a vegetable?", "And a colour?"):
        asked = history + [{"role": "user", "content": question + rules}]
        answer, usage, session, recognised = chat(c, asked)
        seen.append((session, recognised, usage.prompt_tokens_details.cached_tokens))
        assert answer == recompute(c, asked)
        history += [{"role": "user", "content": question},
                    {"role": "assistant", "content": answer}]
    assert [r for _, r, _ in seen[1:]] == ["revised", "revised"]
    assert len({s for s, _, _ in seen}) == 1
    assert seen[1][2] > 0 and seen[2][2] > seen[1][2]  # all that it shares: more each turn
