"""The answer's KV saved as the next turn spells it (compute_worker/respell.py): with the real
model and a real store, a sampled answer whose tokens are not the tokenizer's spelling of its
text is recomputed from there before its KV is saved, the next turn reuses the whole history,
and its answer equals a recompute's token for token (greedy, float32), in both KV formats."""
from __future__ import annotations

import pytest

from bench.respell_bench import collect
from compute_worker.engine import Engine
from compute_worker.kv_client import KVClient
from compute_worker.respell import common_prefix, history_ids
from compute_worker.store_connector import make_connector
from compute_worker.turn_runner import TurnRunner
from kv_store.config import StoreConfig
from kv_store.main import start
from services.runtime.gen import common_pb2

KV, TENSOR6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6
QUESTION = "用中文写一首关于大海的短诗。"  # sampled Chinese answers are often respelt
SEED = 0  # one whose answer is (checked below: the test's precondition)


@pytest.fixture
def store(tmp_path):
    server, core = start(StoreConfig(listen="127.0.0.1:0", data_dir=str(tmp_path)))
    yield KVClient(f"127.0.0.1:{server.port}")
    server.stop(0)
    core.close()


def _runner(smollm, store, fmt=KV) -> TurnRunner:
    model, tok = smollm
    return TurnRunner(Engine(model), make_connector(store, model, "smol", fmt), tok)


def _turn(session: str, messages, **fields) -> common_pb2.TurnRequest:
    turn = common_pb2.TurnRequest(session_id=session, **fields)
    turn.messages.extend(common_pb2.ChatMessage(role=r, content=c) for r, c in messages)
    return turn


def _chat(tok, messages, generation=True) -> list[int]:
    return tok.apply_chat_template([{"role": r, "content": c} for r, c in messages],
                                   add_generation_prompt=generation)


@pytest.mark.parametrize("fmt", [KV, TENSOR6], ids=["kv", "tensor6"])
def test_a_respelt_answer_is_saved_as_the_next_turn_spells_it(smollm, store, fmt):
    _, tok = smollm
    runner, recompute = _runner(smollm, store, fmt), _runner(smollm, None)
    try:
        first = [("user", QUESTION)]
        ids, text, _ = collect(runner, _turn("s", first, max_tokens=40, temperature=1.0,
                                          seed=SEED))
        prompt = _chat(tok, first)
        history = _chat(tok, first + [("assistant", text)], generation=False)
        spoken = prompt + ids[:-1]
        assert common_prefix(history, spoken) < len(spoken)  # precondition: it was respelt
        assert list(store.lookup("s").token_ids) == history  # saved as it will come back

        second = first + [("assistant", text), ("user", "再写一句。")]
        got = collect(runner, _turn("s", second, max_tokens=12, temperature=0))
        want = collect(recompute, _turn("r", second, max_tokens=12, temperature=0))
        assert got[2].cached_tokens == len(history)  # the whole history, closing tokens too
        assert got[0] == want[0] and want[2].cached_tokens == 0
    finally:
        runner.engine.stop()
        recompute.engine.stop()


def test_an_answer_spelt_as_generated_is_saved_as_before(smollm, store):
    _, tok = smollm
    runner = _runner(smollm, store)
    try:
        first = [("user", "Name three colors.")]
        ids, text, summary = collect(runner, _turn("g", first, max_tokens=10, temperature=0))
        prompt = _chat(tok, first)
        assert history_ids(_turn("g", first), tok, prompt, text)[:len(prompt) + len(ids)] == \
            prompt + ids
        # nothing recomputed: the KV of what was fed, the last token's never computed
        assert list(store.lookup("g").token_ids) == prompt + ids[:-1]
    finally:
        runner.engine.stop()


class _Template:
    """A tokenizer whose template drops every assistant message but the last (as reasoning
    models' templates drop earlier thinking): the next prompt is no extension of this one."""
    add_bos = False

    def apply_chat_template(self, messages, add_generation_prompt=True):
        kept = [m for i, m in enumerate(messages)
                if m["role"] != "assistant" or i == len(messages) - 1]
        ids = [ord(c) for m in kept for c in m["role"][0] + m["content"]]
        return ids + ([0] if add_generation_prompt else [])

    def encode(self, text, add_bos=False):
        return [ord(c) for c in text]


def test_history_ids_name_what_the_client_sends_back_or_none():
    tok = _Template()
    chat = _turn("x", [("user", "hi")])
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert history_ids(chat, tok, prompt[:-1], "yo") == [ord(c) for c in "uhiayo"]
    assert history_ids(chat, tok, prompt, "yo") is None  # the template changed the prompt
    raw = common_pb2.TurnRequest(raw_prompt="ab")
    assert history_ids(raw, tok, [97, 98], "cd") == [97, 98, 99, 100]
    ids = common_pb2.TurnRequest(prompt_token_ids=[1, 2])
    assert history_ids(ids, tok, [1, 2], "cd") is None  # ids come back as the client keeps them
    bare = _turn("x", [("user", "hi")], no_generation_prompt=True)
    assert history_ids(bare, tok, [], "cd") is None
    cont = _turn("x", [("user", "hi"), ("assistant", "yo")], continue_final_message=True)
    assert history_ids(cont, tok, [ord(c) for c in "uhiayo"], "!") == \
        [ord(c) for c in "uhiayo!"]
    assert common_prefix([1, 2, 3], [1, 2]) == 2 and common_prefix([], [1]) == 0


def test_the_bench_compares_both_ways_and_every_respelt_answer_equals_a_recompute(smollm):
    from bench.respell_bench import run_respell

    model, tok = smollm
    report = run_respell(model, tok, conversations=2, turns=2, temperature=1.0,
                         max_tokens=40).to_json()
    assert report["answers"] == 4 and report["equal_to_recompute"] == 4
    before, after = report["as_generated"], report["respelt"]
    assert before["respelt_turns"] == 0 and after["respelt_turns"] >= 1  # the Chinese opener
    assert before["later_prompt_tokens"] == after["later_prompt_tokens"]  # the same answers
    assert after["later_cached_tokens"] > before["later_cached_tokens"]


def test_the_bench_command_refuses_a_bad_temperature_by_name():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "services.cli.main", "bench", "respell",
                           "--temperature", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--temperature must be in [0, 2]" in done.stderr


def test_a_token_id_turn_is_saved_as_generated_without_a_tokenizer(smollm, store):
    """Token ids come back as ids: nothing is rendered (a worker may run without a tokenizer)."""
    model, tok = smollm
    runner = TurnRunner(Engine(model), make_connector(store, model, "smol", KV), None)
    try:
        ids = tok.encode("The capital of France is")
        got, _, summary = collect(runner, common_pb2.TurnRequest(
            session_id="t", prompt_token_ids=ids, max_tokens=6, temperature=1.0, seed=3))
        assert summary.respelt_tokens == 0
        assert list(store.lookup("t").token_ids) == ids + got[:-1]
    finally:
        runner.engine.stop()
