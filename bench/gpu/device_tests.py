"""The exactness and model tests, run by pytest with the model device forced
($BIDAW_TEST_DEVICE, honoured by tests/devices.py and the `smollm` fixture)."""
from __future__ import annotations

import os
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from bench.gpu.bounded import run_bounded

# the attention rule and the pinned host copy; fused vs loop attention, transformers logits and
# restored KV on the device; answers from DRAM / SSD / recompute identical token for token;
# SmolLM2's answers in a batch (fused decodes on CUDA) equal to its answers alone
FILES = ("tests/test_attention_rule.py", "tests/test_attention.py", "tests/test_turn_exactness.py",
         "tests/test_engine_batching.py::test_smollm_batched_answers_equal_solo_answers")
TINY = ("tests/test_attention_rule.py",)  # --tiny: the rule and the host copy, seconds


def junit_counts(xml_text: str) -> dict:
    """passed/failed/errors/skipped and the failed tests' ids from pytest's JUnit XML."""
    root = ET.fromstring(xml_text)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    count = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    return {"passed": count["tests"] - count["failures"] - count["errors"] - count["skipped"],
            "failed": count["failures"], "errors": count["errors"],
            "skipped": count["skipped"], "failed_tests": failed}


def run_tests(device_type: str, tiny: bool, limit_s: float) -> dict:
    args = TINY if tiny else FILES
    with tempfile.TemporaryDirectory(prefix="bidaw-gpu-tests-") as tmp:
        junit = Path(tmp) / "junit.xml"
        done = run_bounded([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            f"--junitxml={junit}", *args], limit_s,
                           env=dict(os.environ, BIDAW_TEST_DEVICE=device_type))
        if done.returncode is None:
            return {"error": f"pytest ran past {limit_s:.0f} s", "tail": done.tail()}
        if not junit.exists():
            return {"error": f"pytest exited {done.returncode} without a report",
                    "tail": done.tail()}
        counts = junit_counts(junit.read_text())
    return {"device": device_type, "args": list(args), "returncode": done.returncode, **counts}
