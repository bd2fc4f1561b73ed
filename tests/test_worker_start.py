"""What a worker's start imports: each of these imports cost seconds of every start, every heal
and every test deployment, and nothing else would notice them come back."""
from __future__ import annotations

import subprocess
import sys

import pytest


def modules_after(code: str) -> set[str]:
    """The modules loaded by a fresh interpreter after running `code`."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(*sys.modules)"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return set(out.split())


def test_the_workers_main_process_does_not_import_torch():
    """The gRPC shell and Ray driver; only its actor, another process, loads the model."""
    loaded = modules_after("import compute_worker.main, compute_worker.actor, "
                           "compute_worker.service")
    assert "ray" in loaded and "torch" not in loaded


@pytest.mark.parametrize("arch", ["llama", "opt"])
def test_building_a_model_does_not_import_torch_dynamo(arch):
    """The model is built on the meta device and filled by the loaders: an init there (an
    Embedding's normal_) would import torch._dynamo, ~3 s."""
    loaded = modules_after(
        "from compute_worker.models import build_model\n"
        "from compute_worker.models.config import ModelConfig\n"
        f"build_model(ModelConfig(arch={arch!r}, vocab_size=64, hidden_size=16, num_layers=1, "
        "num_heads=2, num_kv_heads=2, head_dim=8, intermediate_size=32, max_position=64))")
    assert "torch" in loaded and "torch._dynamo" not in loaded


def test_the_actor_is_handed_the_environment_it_reads_and_nothing_else():
    """On a Ray cluster the worker joins, the actor starts in the raylet's environment: tracing,
    keepalives, logs and the native kernels' folder must come from the worker's.
    (tests/test_tracing.py checks a whole trace through a worker that joined the suite's Ray.)"""
    from compute_worker.main import actor_env

    worker = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
              "BIDAW_GRPC_KEEPALIVE_S": "1", "BIDAW_LOG_FORMAT": "text",
              "BIDAW_NATIVE_DIR": "/tmp/n", "BIDAW_WORKER_RAY_ADDRESS": "127.0.0.1:6379",
              "BIDAW_WORKER_CLUSTER_TOKEN_FILE": "/run/token", "HOME": "/root"}
    assert actor_env(worker) == {k: worker[k] for k in (
        "OTEL_EXPORTER_OTLP_ENDPOINT", "BIDAW_GRPC_KEEPALIVE_S", "BIDAW_LOG_FORMAT",
        "BIDAW_NATIVE_DIR")}
