"""Stop strings that span tokens, with the real model (greedy): the answer ends just before the
stop string, no streamed piece holds any part of it, streamed and whole answers agree, and the
KV saved after a stop is that of the answer as the next turn sends it back: without the stop
string (compute_worker/respell.py). First through the worker's
TurnRunner with a real store, then through the live deployment's OpenAI API."""
from __future__ import annotations

import openai
import pytest

from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from compute_worker.turn_summary import PromptCounts
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

MODEL = "smollm2-135m"
COLOURS = [common_pb2.ChatMessage(role="user", content="Name three colors.")]
# (chat messages or raw prompt, stop, the answer without stop, the answer with it)
CASES = [
    (COLOURS, "2. Blue", "1. Red\n2. Blue\n3.", "1. Red\n"),
    (COLOURS, "Blue", "1. Red\n2. Blue\n3.", "1. Red\n2. "),
    ("1, 2, 3, 4,", ", 6", " 5, 6, 7, ", " 5"),
]


@pytest.fixture
def runner(smollm, tmp_path):
    model, tok = smollm
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path)))
    client = KVClient(f"127.0.0.1:{server.port}")
    engine = Engine(model)
    yield TurnRunner(engine, make_connector(client, model, "smol", common_pb2.KV_FORMAT_KV),
                     tok), client
    engine.stop()
    server.stop(0)
    core.close()


def _turn(session: str, prompt, stop: str | None) -> common_pb2.TurnRequest:
    turn = common_pb2.TurnRequest(session_id=session, max_tokens=10, temperature=0,
                                  stop=[stop] if stop else [])
    if isinstance(prompt, str):
        turn.raw_prompt = prompt
    else:
        turn.messages.extend(prompt)
    return turn


def _run(runner: TurnRunner, turn) -> tuple[list[int], list[str], object]:
    ids, pieces, summary = [], [], None
    for new_ids, text, s in runner.run(turn):
        if isinstance(s, PromptCounts):  # before the answer's pieces
            continue
        ids += new_ids
        pieces.append(text)
        summary = s or summary
    return ids, pieces, summary


@pytest.mark.parametrize("prompt, stop, whole, want", CASES)
def test_the_turn_runner_ends_the_answer_before_a_stop_string(runner, prompt, stop, whole, want):
    runner, client = runner
    ids, pieces, summary = _run(runner, _turn("free", prompt, None))
    assert "".join(pieces) == whole and summary.finish_reason == "length"
    got_ids, pieces, summary = _run(runner, _turn("stopped", prompt, stop))
    text = "".join(pieces)
    assert text == want and summary.finish_reason == "stop"
    # the text streamed so far never ends in the beginning of the stop string that completed
    so_far = ""
    for piece in pieces:
        so_far += piece
        assert stop not in so_far and not any(so_far.endswith(stop[:k])
                                              for k in range(1, len(stop)))
    # the stop string's tokens were generated, streamed as ids and counted; the KV saved is
    # the history the next turn sends: the answer's text without them (and a chat's closing)
    assert got_ids == ids[:len(got_ids)] and summary.completion_tokens == len(got_ids)
    tok = runner.tokenizer
    assert tok.decode(got_ids, skip_special_tokens=True) == want + stop
    def history(answer: str) -> list[int]:
        if isinstance(prompt, str):
            return tok.encode(prompt + answer, add_bos=tok.add_bos)
        return tok.apply_chat_template([{"role": m.role, "content": m.content} for m in prompt]
                                       + [{"role": "assistant", "content": answer}],
                                       add_generation_prompt=False)
    closing = len(history("")) - summary.prompt_tokens  # the template's, after the answer
    stored = list(client.lookup("stopped").token_ids)
    # all of it but the last token, whose KV a turn never computes, and the closing tokens
    assert stored == history(want)[:len(stored)]
    assert len(stored) >= len(history(want)) - closing - 1


def test_a_partial_match_that_never_completes_is_released_at_the_end(runner):
    runner, _ = runner
    _, pieces, summary = _run(runner, _turn("partial", COLOURS, "2. Green"))
    assert "".join(pieces) == "1. Red\n2. Blue\n3." and summary.finish_reason == "length"
    assert pieces[4:6] == ["", ""]  # "2" and "." waited for " Blue"


def _openai(deployment) -> openai.OpenAI:
    return openai.OpenAI(base_url=deployment.gateway_url, api_key="unused", max_retries=0,
                         timeout=300)


@pytest.mark.parametrize("prompt, stop, whole, want", CASES)
def test_the_api_answers_end_before_a_stop_string_streamed_or_not(deployment, prompt, stop,
                                                                   whole, want):
    c = _openai(deployment)
    args = dict(model=MODEL, max_tokens=10, temperature=0, stop=[stop])
    if isinstance(prompt, str):
        reply = c.completions.create(prompt=prompt, **args)
        chunks = list(c.completions.create(prompt=prompt, stream=True, **args))
        pieces = [ch.choices[0].text for ch in chunks if ch.choices]
        got = reply.choices[0].text
    else:
        messages = [{"role": m.role, "content": m.content} for m in prompt]
        reply = c.chat.completions.create(messages=messages, **args)
        chunks = list(c.chat.completions.create(messages=messages, stream=True, **args))
        pieces = [ch.choices[0].delta.content or "" for ch in chunks if ch.choices]
        got = reply.choices[0].message.content
    assert got == "".join(pieces) == want
    assert reply.choices[0].finish_reason == chunks[-1].choices[0].finish_reason == "stop"
