"""A trace file that is not one (bytes that are not UTF-8, JSON nested 100,000 deep, numbers
past any token count, wrong types, no turns at all) is one line saying where and why, from the
loader and from every command that reads it; the real files and the `bidaw` entry point."""
from __future__ import annotations

import pytest

from bench.traces import load_trace
from bench.traces.turn import TraceError
from services.cli.main import main

HEADER = "user_id time_stamp(seconds) query_length response_length round_index\n"
DEEP = "[" * 100_000 + "]" * 100_000

CASES = [  # (file name, bytes, format, line or None, words of the reason)
    ("t.txt", HEADER.encode() + b"1 2 3 4 0\n\xff\xfe 1 2\n", "bidaw", 3, "not UTF-8"),
    ("t.txt", (HEADER + "1 2 3 99999999999999999999 0\n").encode(), "bidaw", 2,
     "answer length 99999999999999999999 is outside"),
    ("t.txt", (HEADER + "1 2 -3 4 0\n").encode(), "bidaw", 2, "query length -3"),
    ("t.txt", (HEADER + "1 nan 3 4 0\n").encode(), "bidaw", 2, "not a finite number"),
    ("t.txt", (HEADER + "1 2 3\n").encode(), "bidaw", 2, "3 fields"),
    ("t.txt", (HEADER + "1 2 x 4 0\n").encode(), "bidaw", 2, "invalid literal"),
    ("t.txt", HEADER.encode(), "bidaw", None, "no turns"),
    ("t.jsonl", b'{"timestamp": 1, "input_length": 1e400, "output_length": 3}\n', "mooncake", 1,
     "'input_length' is not a finite number"),
    ("t.jsonl", b'{"timestamp": 1, "input_length": 5}\n{"timestamp": [[[\n', "mooncake", 2,
     "not JSON"),
    ("t.jsonl", (DEEP + "\n").encode(), "mooncake", 1, "nested too deep"),
    ("t.jsonl", b'{"timestamp": "x"}\n', "mooncake", 1, "'timestamp' must be a number"),
    ("t.jsonl", b'{"timestamp": 1' + b"0" * 400 + b'}\n', "mooncake", 1,
     "'timestamp' 1" + "0" * 400 + " is out of range"),
    ("t.jsonl", b'{"timestamp": 1, "output_length": 1' + b"0" * 400 + b'}\n', "mooncake", 1,
     "answer length 1" + "0" * 400 + " is outside"),
    ("t.jsonl", b'{"timestamp": 1, "hash_ids": [[1]]}\n', "mooncake", 1, "'hash_ids'"),
    ("t.jsonl", b'[1, 2]\n', "mooncake", 1, "not a JSON object"),
    ("t.jsonl", b'{"timestamp": 1, "input_length": 2.5}\n', "mooncake", 1,
     "'input_length' must be a whole number, not 2.5"),
    ("t.json", DEEP.encode(), "sharegpt", None, "nested too deep"),
    ("t.json", b'{"a": 1}', "sharegpt", None, "not a JSON array"),
    ("t.json", b'[{"conversations": 5}]', "sharegpt", None, "conversation 0 is not"),
    ("t.json", b'[{"conversations": [{"from": "human", "value": 7}]}]', "sharegpt", None,
     "not a string"),
    ("t.json", b'["\xff"]', "sharegpt", None, "not UTF-8"),
]


@pytest.mark.parametrize("name,data,fmt,line,words", CASES,
                         ids=[f"{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_the_loader_says_where_and_why(tmp_path, name, data, fmt, line, words):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TraceError) as err:
        load_trace(path)  # the format from the name, as `--format auto`
    assert err.value.line == line and err.value.path == str(path)
    assert words in str(err.value), str(err.value)


def test_a_good_file_of_each_format_still_loads(tmp_path):
    (tmp_path / "t.txt").write_text(HEADER + "\n1 2 3 4 0\n2 1.5 3 4 0\n")
    assert [t.user for t in load_trace(tmp_path / "t.txt")] == [2, 1]
    (tmp_path / "t.jsonl").write_text('{"timestamp": 1000, "input_length": 600, '
                                      '"output_length": 5, "hash_ids": [1, 2]}\n')
    assert load_trace(tmp_path / "t.jsonl")[0].time == 1.0
    (tmp_path / "t.json").write_text('[{"conversations": [{"from": "human", "value": "hi"}, '
                                     '{"from": "gpt", "value": "hello there"}]}]')
    assert len(load_trace(tmp_path / "t.json")) == 1


@pytest.mark.parametrize("argv", [
    ["simulate", "--cache-only", "--trace", "{f}", "--policies", "lru", "--dram-gib", "1"],
    ["trace", "stats", "{f}"],
    ["trace", "transform", "{f}", "--shuffle-answers", "--out", "{o}"],
    ["replay", "--trace", "{f}", "--target", "127.0.0.1:1"],
    ["bench", "policies", "--trace", "{f}"],
    ["bench", "live", "--trace", "{f}"],
])
def test_every_command_that_reads_a_trace_says_it_in_one_line(tmp_path, argv):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(HEADER.encode() + b"1 2 \xff 4 0\n")
    out = tmp_path / "out.txt"
    argv = [a.format(f=bad, o=out) for a in argv]
    with pytest.raises(SystemExit) as err:
        main(argv)
    message = err.value.code
    assert isinstance(message, str) and "\n" not in message, message
    flag = "--trace " if "--trace" in argv else ""
    assert message.endswith(f": {flag}{bad}: line 2: not UTF-8 text (byte 5)"), message
    assert not out.exists()
