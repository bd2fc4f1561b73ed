"""`bidaw bench gpu --tiny`: every section of the GPU check runs on the CPU with tiny shapes and
prints one JSON object with sane figures, so the script cannot rot; and its parts alone."""
from __future__ import annotations

import json
import time

import pytest

from bench.gpu.device_tests import junit_counts
from bench.gpu.live import check_argv, live_argv
from bench.gpu.timebox import Timebox
from services.cli.main import main


def test_tiny_mode_prints_every_section(capsys):
    assert main(["bench", "gpu", "--tiny", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "tiny" and out["dtype"] == "bfloat16" and out["failed_sections"] == []
    assert out["tests"]["passed"] >= 3 and out["tests"]["failed"] == out["tests"]["errors"] == 0
    assert out["tests"]["device"] == "cpu"
    assert out["memory_read_gbps"] > 0.1
    assert set(out["throughput"]) == {"opt-13b", "llama-3-8b"}
    for figures in out["throughput"].values():
        assert figures["prefill_tokens_per_s"] > 0
        assert set(figures["decode_tokens_per_s"]) == {"1", "16"}
        assert min(figures["decode_tokens_per_s"].values()) > 0
        assert figures["decode_roofline_fraction"] > 0
        assert min(figures["decode_16_tokens_per_s_by_attention"].values()) > 0
        assert set(figures["decode_step_ms_16x1000_by_attention"]) == {"loop", "fused"}
        assert min(figures["decode_step_ms_16x1000_by_attention"].values()) > 0
        assert figures["attention_rule_at_16"] == "loop"  # the CPU's rule
    t6 = out["tensor6_to_kv"]
    assert t6["tokens"] == 1000 and 0 < t6["ms_per_1k_tokens"] < 1000
    assert t6["from_stored_bytes_ms_per_1k_tokens"] > 0
    copy = out["kv_host_to_device"]
    assert copy["bytes"] == 1000 * 2 * 2 * 4 * 16 * 2  # tiny OPT's bf16 K/V of 1,000 tokens
    assert copy["kv_from_bytes_gbps"] > 0 and copy["pinned_limit_gbps"] is None
    assert "tiny mode" in out["live"]["skipped"]
    assert set(out["live"]["commands"]) == {"bidaw", "fcfs-lru"}
    assert out["live"]["commands"]["bidaw"].startswith("bidaw bench live ")
    assert 0 < out["wall_s"] < out["budget_s"]


def test_bad_flags_get_a_clear_error(capsys):
    assert main(["bench", "gpu", "--device", "nosuchdevice"]) == 2
    assert "--device" in capsys.readouterr().err
    assert main(["bench", "gpu", "--tiny", "--trace", "/no/such/trace.txt"]) == 2
    assert "--trace" in capsys.readouterr().err


def test_live_command_fits_the_budget_and_parses():
    argv = live_argv("fcfs-lru", "", "cuda", 95)
    assert argv[argv.index("--systems") + 1] == "fcfs-lru"
    assert argv[argv.index("--deadline") + 1] == "55"  # 95 s less 40 s to start, drain, stop
    assert argv[argv.index("--dtype") + 1] == "bfloat16"  # the tiers sized for its K/V bytes
    assert "--format" in argv  # no trace given: the synthetic generator
    check_argv(argv)
    with pytest.raises(ValueError, match="bench live rejects"):
        check_argv([*argv, "--no-such-flag"])


def test_sections_report_errors_timeouts_and_a_spent_total():
    box = Timebox(total_s=3.0, min_s=0.5)
    assert box.run(1.0, lambda s: {"budget": s})["budget"] == 1.0

    def fail(_s):
        raise RuntimeError("out of memory")
    assert box.run(1.0, fail)["error"] == "RuntimeError: out of memory"
    start = time.monotonic()
    late = box.run(0.6, lambda s: time.sleep(5) or {})
    assert late["error"] == "ran past its 1 s budget" and time.monotonic() - start < 2
    time.sleep(max(0.0, box.deadline - time.monotonic()))
    assert "spent" in box.run(1.0, lambda s: {})["skipped"]


def test_junit_counts():
    xml = """<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
      <testcase classname="tests.test_a" name="test_ok"/>
      <testcase classname="tests.test_a" name="test_bad"><failure message="x"/></testcase>
      <testcase classname="tests.test_b" name="test_err"><error message="y"/></testcase>
    </testsuite></testsuites>"""
    assert junit_counts(xml) == {"passed": 2, "failed": 1, "errors": 1, "skipped": 1,
                                 "failed_tests": ["tests.test_a::test_bad",
                                                  "tests.test_b::test_err"]}
