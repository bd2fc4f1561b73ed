"""JSON mode's grammar (compute_worker/json_grammar.py), against Python's own JSON parser: every
JSON object, however spaced, is accepted byte by byte and complete at its end; nothing that is
not one object is ever complete; blanks and nesting are bounded."""
from __future__ import annotations

import json
import random

from compute_worker.json_grammar import MAX_BLANKS, MAX_DEPTH, START, complete, feed


def _value(rng: random.Random, depth: int = 0):
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-10 ** 6, 10 ** 6)
    if kind == "float":
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-30, 30)
    if kind == "str":
        return "".join(rng.choice('ab é"\\\n\t/ü€😀\x01') for _ in range(rng.randint(0, 8)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {str(_value(rng, 4)): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_every_json_object_is_accepted_at_each_byte_and_complete_at_its_end():
    rng = random.Random(7)
    for _ in range(400):
        obj = {str(k): _value(rng) for k in range(rng.randint(0, 5))}
        text = json.dumps(obj, indent=rng.choice([None, 1, 2]), ensure_ascii=rng.random() < 0.5,
                          separators=rng.choice([None, (",", ":"), (", ", ": ")]))
        data, state = text.encode(), START
        for i in range(len(data)):
            state = feed(state, data[i:i + 1])
            assert state is not None, (text, i)
            assert complete(state) == (i == len(data) - 1), (text, i)


def test_what_is_not_one_object_is_refused_or_never_complete():
    for text in ['[]', '"x"', '1', 'true', '{"a":01}', '{"a":1,}', '{,}', '{"a" 1}', '{"a":tru}',
                 '{"a":"\x01"}', '{"a":.5}', '{"a":1.}', '{"a":[1,]}', '{} {}', '{"a":-}',
                 '{"a":1e}', '{a:1}', "{'a':1}", '{"a":"\\x"}', '{"a":"\\u12g4"}', '{"a":NaN}',
                 '{"a":[}', '{"a":1]']:
        state = feed(START, text.encode())
        assert state is None or not complete(state), text


def test_random_bytes_are_complete_only_when_python_reads_one_object():
    rng = random.Random(3)
    alphabet = '{}[]":,.-+eE0123456789 \ntrufalsn\\ax'
    for _ in range(100_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))
        state = feed(START, text.encode())
        try:
            one = isinstance(json.loads(text), dict)
        except ValueError:
            one = False
        assert (state is not None and complete(state)) == one, text


def test_blank_runs_and_nesting_are_bounded():
    assert feed(START, b"{" + b" " * MAX_BLANKS) is not None
    assert feed(START, b"{" + b" " * (MAX_BLANKS + 1)) is None
    assert feed(START, b'{"a":' + b"[" * (MAX_DEPTH - 1)) is not None
    assert feed(START, b'{"a":' + b"[" * MAX_DEPTH) is None
