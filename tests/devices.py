"""The device the model tests run on: $BIDAW_TEST_DEVICE, cpu by default (`bidaw bench gpu` runs
them with cuda). Asking for a device that is not there fails the tests instead of skipping them."""
from __future__ import annotations

import os

import torch


def model_device() -> torch.device:
    device = torch.device(os.environ.get("BIDAW_TEST_DEVICE", "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("BIDAW_TEST_DEVICE asks for cuda but torch sees no CUDA device")
    return device
