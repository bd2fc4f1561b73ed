"""A wrong --model is refused before Ray and the engine actor start: one line naming the flag
and what is wrong, exit 1, in seconds (it was the actor's 59-line traceback after Ray's start)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from compute_worker.loaders.model_source import model_source
from tests.shared_ray import OWN_RAY


def test_model_source_names_what_a_spec_holds(tmp_path):
    assert model_source("smollm2-135m") is None
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(20))
    assert model_source(str(gguf)) == gguf
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert model_source(str(hf)) == hf


@pytest.mark.parametrize("make, error", [
    (lambda d: d / "missing.gguf", "no such file or directory"),
    (lambda d: d, "a directory without config.json"),
    (lambda d: (d / "junk.gguf").write_bytes(b"\x00" * 64) and d / "junk.gguf", "not a GGUF file"),
    (lambda d: (d / "m.bin").write_bytes(b"GGUF" + bytes(20)) and d / "m.bin", "not a GGUF file"),
])
def test_a_spec_that_names_no_model_is_refused(tmp_path, make, error):
    with pytest.raises(ValueError, match=error):
        model_source(str(make(tmp_path)))


def test_serve_worker_refuses_a_wrong_model_in_one_line_before_ray(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(os.urandom(5000))
    out = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "serve", "worker", "--listen", "127.0.0.1:0",
         "--insecure-no-auth", "true", "--model", str(junk)], capture_output=True, text=True,
        timeout=120, cwd=pathlib.Path(__file__).parent.parent,
        env={**os.environ, "RAY_AUTH_MODE": "disabled", **OWN_RAY})
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"bidaw serve worker: --model {junk}: not a GGUF file (expected a .gguf file starting "
        "with b'GGUF')")
    assert "Traceback" not in out.stderr and "Started a local Ray" not in out.stderr
