"""vLLM's add_special_tokens (inference-perf sends `false` with every chat-templated raw prompt):
the tokenizer's BOS before the prompt or not, with a real tokenizer that adds one and with
SmolLM2's (which adds none), and through the live gateway."""
from __future__ import annotations

import pytest

from compute_worker.loaders.gguf_file import GGUFFile
from compute_worker.loaders.gguf_loader import default_model_path
from compute_worker.prompt import prompt_ids
from compute_worker.respell import history_ids
from compute_worker.tokenizer import ChatTokenizer
from services.runtime.gen import common_pb2
from tests.test_prompt_bound import post

TEXT = "<|im_start|>user\nName a planet.<|im_end|>\n<|im_start|>assistant\n"
QUESTION = [("user", "Name a planet.")]


@pytest.fixture(scope="module")
def tokenizers():
    """SmolLM2's tokenizer as it is (no BOS), and the same told to add BOS (as Llama's is)."""
    plain = ChatTokenizer.from_gguf(GGUFFile(default_model_path()))
    with_bos = ChatTokenizer(plain.tokenizer, plain.chat_template, bos_token_id=0,
                             eos_token_ids=plain.eos_token_ids, add_bos=True)
    return plain, with_bos


def turn(messages=(), **fields) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id="s", messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in messages], **fields)


def ids(t, tok):
    return prompt_ids(t, tok, tok.vocab_size, 8192)


def test_raw_prompts_get_bos_unless_asked_not_to(tokenizers):
    plain, with_bos = tokenizers
    text = plain.tokenizer.encode(TEXT, add_special_tokens=False).ids
    assert ids(turn(raw_prompt=TEXT), with_bos) == [0] + text  # vLLM's completions default
    assert ids(turn(raw_prompt=TEXT, add_special_tokens=True), with_bos) == [0] + text
    assert ids(turn(raw_prompt=TEXT, add_special_tokens=False), with_bos) == text
    for flag in (True, False):  # a tokenizer that adds none adds none either way
        assert ids(turn(raw_prompt=TEXT, add_special_tokens=flag), plain) == text
    assert ids(turn(prompt_token_ids=[5, 6], add_special_tokens=True), with_bos) == [5, 6]


def test_chat_gets_bos_only_when_asked(tokenizers):
    plain, with_bos = tokenizers
    templated = plain.apply_chat_template([{"role": "user", "content": "Name a planet."}],
                                          add_generation_prompt=True)
    assert ids(turn(QUESTION), with_bos) == templated  # the template writes its own
    assert ids(turn(QUESTION, add_special_tokens=False), with_bos) == templated
    assert ids(turn(QUESTION, add_special_tokens=True), with_bos) == [0] + templated
    assert ids(turn(QUESTION, add_special_tokens=True), plain) == templated
    prefill = dict(continue_final_message=True, no_generation_prompt=True)
    messages = QUESTION + [("assistant", "Mars")]
    assert ids(turn(messages, add_special_tokens=True, **prefill), with_bos) == \
        [0] + ids(turn(messages, **prefill), with_bos)


def test_the_next_turns_spelling_keeps_the_choice(tokenizers):
    """The answer's KV is saved as the next turn will spell it: with the same BOS choice."""
    _, with_bos = tokenizers
    for flag in (True, False):
        t = turn(raw_prompt=TEXT, add_special_tokens=flag)
        prompt = ids(t, with_bos)
        spelt = history_ids(t, with_bos, prompt, "Mars.")
        assert spelt[:len(prompt)] == prompt and (spelt[0] == 0) == flag


def test_the_gateway_takes_it_on_completions_and_chat(deployment):
    base = deployment.gateway_url
    answers = set()
    for flag in (None, False, True):
        extra = {} if flag is None else {"add_special_tokens": flag}
        status, got = post(base, "/v1/completions", {
            "model": "smollm2-135m", "prompt": TEXT, "max_tokens": 6, "temperature": 0,
            "cache_salt": f"bos-{flag}", **extra})
        assert status == 200, got
        answers.add((got["choices"][0]["text"], got["usage"]["prompt_tokens"]))
        status, got = post(base, "/v1/chat/completions", {
            "model": "smollm2-135m", "messages": [{"role": "user", "content": "Name a planet."}],
            "max_tokens": 6, "temperature": 0, "cache_salt": f"bos-{flag}", **extra})
        assert status == 200, got
    assert len(answers) == 1  # SmolLM2 adds no BOS: the same prompt and answer every way
    status, got = post(base, "/v1/completions", {"model": "smollm2-135m", "prompt": "x",
                                                 "add_special_tokens": "no"})
    assert status == 400 and got["error"]["param"] == "add_special_tokens"
