"""Benchmark-style clients that send no session id, through the live deployment (real
processes, the real model, greedy): SGLang's multi-turn client (the whole history as one raw
text prompt, streamed, ignore_eos), the same with token ids, and vLLM's multi-turn chat client
(every turn streamed). Each reuses KV as well as with X-Session-Id, and answers equal recompute.
"""
from __future__ import annotations

import uuid

from tests.test_conversations_e2e import MODEL, chat, client, system

FIRST = ("You are a patient tutor. Answer in one short sentence. " * 6
         + "Question: name a planet of the solar system.")  # > 256 characters: a whole chunk
NEXT = [" Next question: how far is it from the sun?", " Next question: is it cold there?",
        " Next question: thank you, anything else?"]


def complete(c, prompt, session=None, max_tokens=8, salt=None):
    """Streamed like SGLang's bench_multiturn: (text, usage, session header, recognised).
    `salt`: a cache_salt, so that the run reads and leaves no KV for unsalted ones."""
    extra = {"extra_headers": {"X-Session-Id": session}} if session else {}
    body = {"ignore_eos": True, **({"cache_salt": salt} if salt else {})}
    raw = c.completions.with_raw_response.create(
        model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body=body, **extra)
    chunks = list(raw.parse())
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    return (text, chunks[-1].usage, raw.headers["x-bidaw-session"],
            raw.headers["x-bidaw-session-recognised"])


def sglang_client(c, first=FIRST, session=None, rounds=4, salt=None):
    """history += generated_text; history += next question; the whole history each round."""
    history, turns = first, []
    for r in range(rounds):
        turns.append(complete(c, history, session, salt=salt))
        history += turns[-1][0]
        if r < rounds - 1:
            history += NEXT[r]
    return turns, history


def cached(turn) -> int:
    return turn[1].prompt_tokens_details.cached_tokens


def test_sglang_style_raw_history_reuses_as_with_a_session_id(deployment):
    c = client(deployment.gateway_url)
    tag = uuid.uuid4().hex[:6]
    # (the named run salted: the plain one must find nothing of it)
    named, _ = sglang_client(c, f"[{tag}] " + FIRST, session=f"sglang-named-{tag}", salt=tag)
    plain, history = sglang_client(c, f"[{tag}] " + FIRST)
    assert [t[0] for t in plain] == [t[0] for t in named]
    assert [t[3] for t in plain] == ["new", "content", "content", "content"]
    assert len({t[2] for t in plain}) == 1
    for by_id, by_content in zip(named[1:], plain[1:]):
        assert cached(by_id) > 0 and abs(cached(by_content) - cached(by_id)) <= 8
    last_prompt = history[:len(history) - len(plain[-1][0])]
    fresh = complete(c, last_prompt, session=f"recompute-{uuid.uuid4().hex}",
                     salt=uuid.uuid4().hex)
    assert cached(fresh) == 0 and fresh[0] == plain[-1][0]


def test_two_sglang_clients_with_one_first_prompt_branch_without_thrashing(deployment):
    c = client(deployment.gateway_url)
    first = f"[{uuid.uuid4().hex[:6]}] " + FIRST
    turns = {k: [] for k in "ab"}
    history = dict.fromkeys("ab", first)
    asks = {"a": NEXT, "b": [q.replace("Next question", "And") for q in NEXT]}
    for r in range(3):  # interleaved round by round
        for k in "ab":
            turns[k].append(complete(c, history[k]))
            history[k] += turns[k][-1][0] + asks[k][r]
    a, b = turns["a"], turns["b"]
    assert (a[0][3], b[0][3]) == ("new", "branch")
    assert cached(b[0]) == b[0][1].prompt_tokens - 1  # its whole prompt read from a's KV
    for own in (a, b):
        assert [t[3] for t in own[1:]] == ["content", "content"]
        for before, after in zip(own, own[1:]):  # all of the previous turn kept: no thrash
            assert cached(after) >= before[1].prompt_tokens + before[1].completion_tokens - 2
    assert a[2][2] != b[2][2]
    for k in "ab":
        prompt = history[k][:len(history[k]) - len(asks[k][2])]
        prompt = prompt[:len(prompt) - len(turns[k][2][0])]
        assert complete(c, prompt, session=f"recompute-{uuid.uuid4().hex}",
                     salt=uuid.uuid4().hex)[0] == turns[k][2][0]


def test_token_id_history_reuses_as_with_a_session_id(deployment, smollm):
    _, tok = smollm
    c = client(deployment.gateway_url)
    tag = uuid.uuid4().hex[:6]
    runs = {}
    for session in (f"ids-named-{tag}", None):
        ids, turns = tok.encode(f"[{tag}] " + FIRST, add_bos=tok.add_bos), []
        for r in range(3):
            turns.append(complete(c, ids, session, salt=tag if session else None))
            ids = ids + tok.encode(turns[-1][0] + NEXT[r], add_bos=False)
        runs[session is None] = turns
    named, plain = runs[False], runs[True]
    assert [t[0] for t in plain] == [t[0] for t in named]
    assert [t[3] for t in plain] == ["new", "content", "content"]  # re-encoding kept the ids
    for by_id, by_content in zip(named[1:], plain[1:]):
        assert cached(by_id) > 0 and abs(cached(by_content) - cached(by_id)) <= 8


def test_vllm_style_streamed_chat_reuses_as_with_a_session_id(deployment):
    c = client(deployment.gateway_url)
    tag = uuid.uuid4().hex[:6]
    runs = {}
    for session in (f"vllm-named-{tag}", None):
        messages, turns = [system(f"vllm {tag}")], []
        for q in ["Name a fruit.", "What colour is it?", "Where does it grow?"]:
            messages.append({"role": "user", "content": q})
            turns.append(chat(c, messages, session, stream=True, salt=tag if session else None))
            messages.append({"role": "assistant", "content": turns[-1][0]})
        runs[session is None] = turns
    named, plain = runs[False], runs[True]
    assert [t[0] for t in plain] == [t[0] for t in named]
    assert [t[3] for t in plain] == ["new", "content", "content"]
    for by_id, by_content in zip(named[1:], plain[1:]):
        assert cached(by_id) > 0 and abs(cached(by_content) - cached(by_id)) <= 8


def test_inference_perf_style_history_joined_with_spaces_stays_one_session(deployment):
    """inference-perf and guidellm send `previous prompt + " " + answer + " " + question`: our
    answer is not resent as relayed, so the turn used to branch into a new session with a new
    copy of the history's KV every round. It now continues its session from the prompt
    (`revised`), and the last answer equals a recompute."""
    c = client(deployment.gateway_url)
    prompt, turns = f"[{uuid.uuid4().hex[:6]}] " + FIRST, []
    for r in range(3):
        turns.append(complete(c, prompt))
        if r < 2:
            prompt += " " + turns[-1][0] + " " + NEXT[r].strip()
    assert [t[3] for t in turns] == ["new", "revised", "revised"]
    assert len({t[2] for t in turns}) == 1
    for before, after in zip(turns, turns[1:]):  # at least all of the previous prompt
        assert cached(after) >= before[1].prompt_tokens - 32
    fresh = complete(c, prompt, session=f"recompute-{uuid.uuid4().hex}", salt=uuid.uuid4().hex)
    assert cached(fresh) == 0 and fresh[0] == turns[-1][0]
