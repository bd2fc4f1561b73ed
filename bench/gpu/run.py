"""The whole GPU check, section after section, within one total: the device's tests, the read
bandwidth, each model's throughput (and on OPT-13B's shape the restore side), the live replay."""
from __future__ import annotations

import gc
import time

import torch

from bench.compute.bandwidth import memory_read_gbps
from bench.gpu.device_tests import run_tests
from bench.gpu.live import live
from bench.gpu.restore import kv_host_to_device, tensor6_to_kv
from bench.gpu.shapes import random_model_on, shapes
from bench.gpu.throughput import throughput
from bench.gpu.timebox import Timebox

DTYPE = torch.bfloat16
# seconds per section and in all: under 8 minutes on one H200 (and its sections finish early)
GPU_BUDGETS = dict(total=470, tests=150, read=15, model=75, tensor6=25, copy=25, live=190)
# --tiny: caps only (it takes ~20 s), wide enough for a loaded CI runner
TINY_BUDGETS = dict(total=300, tests=60, read=20, model=90, tensor6=30, copy=30, live=10)
READ_BYTES = {"gpu": 4 << 30, "tiny": 64 << 20}


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({torch.get_num_threads()} threads)"


def run(device: torch.device, tiny: bool, trace: str) -> dict:
    mode = "tiny" if tiny else "gpu"
    budgets = TINY_BUDGETS if tiny else GPU_BUDGETS
    box, start = Timebox(budgets["total"]), time.monotonic()
    out = {"mode": mode, "device": describe(device), "torch": torch.__version__,
           "dtype": str(DTYPE).removeprefix("torch."), "budget_s": budgets["total"]}
    out["tests"] = box.run(budgets["tests"], lambda s: run_tests(device.type, tiny, s),
                           alarm=False)
    read = box.run(budgets["read"], lambda s: {
        "gbps": memory_read_gbps(READ_BYTES[mode], device)})
    out["memory_read_gbps"] = read.get("gbps")
    if "error" in read:
        out["memory_read_error"] = read["error"]
    out["throughput"] = {}
    for name, shape in shapes(tiny).items():
        held: dict = {}

        def figures(_s):  # called at once, in this iteration
            built = time.monotonic()
            held["model"] = random_model_on(shape, device, DTYPE)
            return {"build_s": time.monotonic() - built,
                    **throughput(held["model"], read.get("gbps"))}
        out["throughput"][name] = box.run(budgets["model"], figures)
        if name == "opt-13b":  # the paper's tensor-6 model: its restore side
            out["tensor6_to_kv"] = box.run(budgets["tensor6"],
                                           lambda _s: tensor6_to_kv(_need(held, "model")))
            out["kv_host_to_device"] = box.run(budgets["copy"],
                                               lambda _s: kv_host_to_device(_need(held, "model")))
        held.clear()
        _free(device)
    out["live"] = box.run(budgets["live"], lambda s: live(trace, device.type, tiny, s),
                          alarm=False)
    sections = {"tests": out["tests"], "memory_read": read, "tensor6_to_kv": out["tensor6_to_kv"],
                "kv_host_to_device": out["kv_host_to_device"], "live": out["live"],
                **{f"throughput.{k}": v for k, v in out["throughput"].items()}}
    out["failed_sections"] = sorted(k for k, v in sections.items() if "error" in v)
    out["wall_s"] = round(time.monotonic() - start, 1)
    return out


def _need(section: dict, key: str):
    """A figure an earlier section made; a clear error if it failed to."""
    if section.get(key) is None:
        raise RuntimeError(f"needs {key!r} from an earlier section, which did not produce it")
    return section[key]


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
