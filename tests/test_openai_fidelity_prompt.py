"""The worker's prompt ids for raw completions and vLLM's prefill flags, with SmolLM2's real
tokenizer and chat template; each expectation is built independently of compute_worker/prompt."""
from __future__ import annotations

import pytest

from compute_worker.loaders.gguf_file import GGUFFile
from compute_worker.loaders.gguf_loader import default_model_path
from compute_worker.prompt import TurnError, prompt_ids
from compute_worker.tokenizer import ChatTokenizer
from services.runtime.gen import common_pb2

IM_END = "<|im_end|>"
QUESTION = [("user", "What is the capital of France?")]
PREFILL = "The capital of France is"


@pytest.fixture(scope="module")
def reader():
    return GGUFFile(default_model_path())


@pytest.fixture(scope="module")
def tok(reader):
    return ChatTokenizer.from_gguf(reader)


def turn(messages=(), **fields) -> common_pb2.TurnRequest:
    return common_pb2.TurnRequest(session_id="s", messages=[
        common_pb2.ChatMessage(role=r, content=c) for r, c in messages], **fields)


def ids_of(turn_, tok) -> list[int]:
    return prompt_ids(turn_, tok, tok.vocab_size, 8192)


def test_smollm2_adds_no_bos_to_raw_text(reader, tok):
    # what the model's GGUF metadata says, read directly
    assert reader.fields["tokenizer.ggml.add_bos_token"] is False
    assert not tok.add_bos


def test_raw_prompt_is_tokenized_as_it_is(tok):
    ids = ids_of(turn(raw_prompt=PREFILL), tok)
    assert ids == tok.tokenizer.encode(PREFILL, add_special_tokens=False).ids
    assert len(ids) == 5  # the chat template made it 35 tokens
    assert tok.decode(ids) == PREFILL
    # special-token text in a raw prompt is the token, as in vLLM's completions
    assert ids_of(turn(raw_prompt="<|im_start|>user"), tok)[0] == tok.tokenizer.token_to_id(
        "<|im_start|>")


def test_token_id_prompts_stay_as_they_are(tok):
    assert ids_of(turn(prompt_token_ids=[504, 3575, 0, 49151]), tok) == [504, 3575, 0, 49151]


def test_continue_final_message_leaves_the_assistant_message_open(tok):
    messages = QUESTION + [("assistant", PREFILL)]
    ids = ids_of(turn(messages, continue_final_message=True, no_generation_prompt=True), tok)
    # the generation prompt after the question, then the assistant's text and nothing more
    opened = tok.render_chat([{"role": r, "content": c} for r, c in QUESTION],
                             add_generation_prompt=True)
    assert ids == tok.encode(opened + PREFILL)
    tail = tok.encode(PREFILL)
    assert ids[-len(tail):] == tail
    assert IM_END not in tok.decode(ids[-len(tail) - 1:])
    # the gRPC flag alone implies no new assistant header
    assert ids_of(turn(messages, continue_final_message=True), tok) == ids


def test_no_generation_prompt_closes_the_last_message_without_a_header(tok):
    messages = QUESTION + [("assistant", "Paris.")]
    ids = ids_of(turn(messages, no_generation_prompt=True), tok)
    text = tok.decode(ids)
    assert text.endswith("Paris." + IM_END + "\n")
    with_header = ids_of(turn(messages), tok)
    assert tok.decode(with_header) == text + "<|im_start|>assistant\n"


@pytest.mark.parametrize("fields, message", [
    ({"messages": QUESTION, "continue_final_message": True}, "last assistant message"),
    ({"messages": QUESTION, "raw_prompt": "x"}, "give one of"),
    ({"raw_prompt": "x", "prompt_token_ids": [1]}, "give one of"),
    ({"prompt_token_ids": [49152]}, "must lie in"),
])
def test_bad_prompts_are_refused(tok, fields, message):
    messages = fields.pop("messages", ())
    with pytest.raises(TurnError, match=message):
        ids_of(turn(messages, **fields), tok)
