"""ChatTokenizer (built from GGUF metadata) against transformers' GGUF tokenizer, and chat-prefix property."""
from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from compute_worker.loaders.gguf_loader import default_model_path  # noqa: E402
from compute_worker.tokenizer import ChatTokenizer  # noqa: E402

TEXTS = [
    "Hello world!",
    "  leading spaces and\ttabs\n\nnewlines  \n",
    "Numbers: 3.14159, 2024-06-01, 1,000,000 and x2y3",
    "Unicode: héllo naïve café — “quotes” 日本語のテキスト 한국어 Ελληνικά 🙂👍🏽",
    "code: def f(x):\n    return x**2  # comment\n",
    "don't I'll we're THEY'VE",
    "special tokens inline: <|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "",
]

CONVO = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And times 10? Answer in digits: 40 or 400?"},
    {"role": "assistant", "content": "40 — obviously. 🙂"},
    {"role": "user", "content": "Thanks!"},
]


@pytest.fixture(scope="module")
def ours() -> ChatTokenizer:
    return ChatTokenizer.from_gguf(default_model_path())


@pytest.fixture(scope="module")
def reference():
    path = default_model_path()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


@pytest.mark.parametrize("text", TEXTS)
def test_ids_match_transformers(ours, reference, text):
    assert ours.encode(text) == reference(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_roundtrip(ours, text):
    assert ours.decode(ours.encode(text)) == text


def test_special_tokens_are_atomic(ours):
    ids = ours.encode("<|im_start|>assistant\n")
    assert ids[0] == 1 and ours.decode([1]) == "<|im_start|>"
    assert ours.encode("<|im_end|>") == [2]
    assert ours.decode(ours.encode("a<|im_end|>b"), skip_special_tokens=True) == "ab"


def test_digits_are_split(ours):
    # llama.cpp pre type "smollm" isolates every digit; SmolLM2's vocab also has no multi-digit
    # tokens, so this holds even without the split and mainly guards against digit merges.
    assert len(ours.encode("12345")) == 5


def test_chat_template_matches_transformers(ours, reference):
    for gen in (True, False):
        for n in (1, 2, 4):
            msgs = CONVO[1:n + 1]  # without a system message the template injects its default one
            text = reference.apply_chat_template(msgs, add_generation_prompt=gen, tokenize=False)
            assert ours.render_chat(msgs, add_generation_prompt=gen) == text
            assert ours.apply_chat_template(msgs, add_generation_prompt=gen) == \
                reference(text, add_special_tokens=False)["input_ids"]
    assert ours.render_chat(CONVO[:2]).startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")


def test_chat_prefix_property(ours):
    for n in range(1, len(CONVO)):
        short = ours.apply_chat_template(CONVO[:n], add_generation_prompt=False)
        longer = ours.apply_chat_template(CONVO, add_generation_prompt=False)
        assert longer[:len(short)] == short, n
        if CONVO[n]["role"] == "assistant":  # the generation prompt is a prefix of the answer turn
            prompt = ours.apply_chat_template(CONVO[:n], add_generation_prompt=True)
            assert longer[:len(prompt)] == prompt, n


def test_metadata(ours):
    assert ours.vocab_size == 49152
    assert ours.eos_token_ids == [2] and ours.bos_token_id == 1
