"""`bidaw bench sessions` in a tiny mode: a real deployment, the JSON it prints."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_bench_sessions_prints_reuse_side_by_side_and_the_overhead():
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "bench", "sessions", "--conversations", "2",
         "--turns", "2", "--max-tokens", "4", "--index-size", "2000", "--json"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    named, plain = result["with_ids"], result["without_ids"]
    assert named["recognised"] == {"id": 4}
    assert plain["recognised"] == {"new": 2, "content": 2}
    assert named["cached_tokens"] > 0 and named["prompt_tokens"] == plain["prompt_tokens"]
    assert abs(named["cached_tokens"] - plain["cached_tokens"]) <= 8 * 2
    named, plain = result["raw_with_ids"], result["raw_without_ids"]  # SGLang-style raw text
    assert named["recognised"] == {"id": 4}
    assert plain["recognised"] == {"new": 2, "content": 2}
    assert named["cached_tokens"] > 0 and named["prompt_tokens"] == plain["prompt_tokens"]
    assert abs(named["cached_tokens"] - plain["cached_tokens"]) <= 8 * 2
    # named users opening with one system prompt: the second reads it from the first unless
    # salted apart (each first turn then computes it all)
    apart, shared = result["system_prompt_isolated"], result["system_prompt_shared"]
    assert apart["first_cached_tokens"] == 0
    assert shared["first_cached_tokens"] > 100  # the second user's ~120-token system prompt
    # ... and only the second's: the first user's first turn has nothing to read
    assert shared["first_cached_tokens"] <= shared["first_prompt_tokens"] // 2
    assert shared["first_prompt_tokens"] == apart["first_prompt_tokens"]
    raw = result["raw_overhead"]
    assert raw["history_chars"] == 100_000 and raw["recognised"] == {"content": 200}
    assert 0 < raw["per_turn_ms_p50"] < 5  # "a few ms" for a 100 KB history
    overhead = result["overhead"]
    assert overhead["index_conversations"] >= 2000
    assert 0 < overhead["per_turn_us_p50"] < 1000  # the target: under a millisecond


def test_bench_sessions_refuses_bad_turn_counts():
    out = subprocess.run([sys.executable, "-m", "services.cli.main", "bench", "sessions", "--turns",
                          "99"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    assert out.returncode == 2 and "--turns" in out.stderr
