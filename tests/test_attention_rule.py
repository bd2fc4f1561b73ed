"""Which attention path a batch takes (a pure rule of device and batch shape), and the host copy
of restored KV to the test device ($BIDAW_TEST_DEVICE): light enough for `bench gpu --tiny`."""
from __future__ import annotations

import pytest
import torch

from compute_worker.host_copy import to_device
from compute_worker.models import attention
from compute_worker.models.attention import forced_path, fused_rows
from tests.devices import model_device


def test_fused_rule_by_device_and_batch():
    assert fused_rows("cpu", [1, 1, 1, 1, 1, 1, 1, 1, 1]) == []  # the loop wins on the CPU
    assert fused_rows("cuda", [1, 5, 1, 1]) == [0, 2, 3]  # decodes together, the prefill alone
    assert fused_rows("cuda", [1, 7]) == []  # one decode: nothing to fuse
    assert fused_rows("cuda", [3, 4]) == []
    assert fused_rows("cpu", [3, 1], forced="fused") == [0, 1]
    assert fused_rows("cuda", [1, 1], forced="loop") == []
    with pytest.raises(ValueError, match="'loop' or 'fused'"):
        with forced_path("flash"):
            pass


def test_forced_path_nests_and_restores():
    with forced_path("fused"):
        with forced_path("loop"):
            assert attention._forced == "loop"
        assert attention._forced == "fused"
    assert attention._forced is None  # the rule decides again


def test_host_copy_to_the_test_device():
    device = model_device()
    host = torch.arange(24, dtype=torch.float32).view(2, 3, 4)
    for tensor in (host, host.transpose(0, 2), host.to(torch.bfloat16)):
        moved = to_device(tensor, device)
        assert moved.device.type == device.type and moved.dtype == tensor.dtype
        assert torch.equal(moved.cpu(), tensor)
        if device.type == "cpu":
            assert moved is tensor  # nothing copied on the CPU
