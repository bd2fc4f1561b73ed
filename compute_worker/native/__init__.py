"""Our CPU kernels, built on first use with the machine's C++ compiler: q4_kernels.cpp (the q4
format's matmuls) and llama_forward.cpp (a q4 Llama's layers in one call).

`ops()` returns `torch.ops.bidaw_native` once the library is built and loaded, or None where it
cannot be (no AVX2, no compiler, a failed build): `why_not()` then says why, and the callers keep
torch's kernels. The build (~1 min on 2 cores) is cached per source and torch version under
BIDAW_NATIVE_DIR (default ~/.cache/bidaw/native); `make setup` runs it once
(`python -m compute_worker.native`), so workers and tests find it built.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
SOURCES = [HERE / "q4_kernels.cpp", HERE / "llama_forward.cpp"]
HEADERS = [HERE / "q4_matmul.h"]
# -ffp-contract=off: why in llama_forward.cpp. -fopenmp for at::parallel_for's threads; the link
# takes no -fopenmp, so its GOMP calls bind to the OpenMP runtime torch itself loaded (one pool).
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-fopenmp"]
_lock = threading.Lock()
_state: dict[str, object] = {}


def build_dir() -> Path:
    """Where the library is built: one folder per source and torch version."""
    text = b"".join(p.read_bytes() for p in (*SOURCES, *HEADERS)) + " ".join(FLAGS).encode()
    digest = hashlib.sha256(text).hexdigest()[:12]
    root = Path(os.environ.get("BIDAW_NATIVE_DIR") or Path.home() / ".cache" / "bidaw" / "native")
    return root / f"torch{torch.__version__.replace('+', '-')}-{digest}"


def _reason_not_to_build() -> str | None:
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        return f"the CPU is {torch.backends.cpu.get_cpu_capability()}, the kernels need AVX2"
    return None


def _load():
    reason = _reason_not_to_build()
    if reason is not None:
        return None, reason
    folder = build_dir()
    built = folder / "bidaw_native.so"
    # this source's build, finished (torch's builder holds `lock` while it links): load it as it
    # is, a read-only image's too; else build, or wait for the process building it
    if built.is_file() and not (folder / "lock").exists():
        torch.ops.load_library(str(built))
        return torch.ops.bidaw_native, ""
    from torch.utils import cpp_extension
    if shutil.which("ninja") is None:  # the ninja wheel's, beside this interpreter
        here = str(Path(sys.executable).parent)
        os.environ["PATH"] = os.pathsep.join((here, os.environ.get("PATH", "")))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        cpp_extension.load("bidaw_native", [str(p) for p in SOURCES], extra_cflags=FLAGS,
                           build_directory=str(folder), is_python_module=False, verbose=False)
    except Exception as exc:  # a missing compiler or ninja, a failed build: keep torch's kernels
        lines = [line for line in str(exc).splitlines() if "error" in line.lower()] or [str(exc)]
        return None, f"the native kernels did not build ({type(exc).__name__}: {lines[0][-300:]})"
    return torch.ops.bidaw_native, ""


def ops():
    """The loaded kernels, or None (why_not() says why). Built once per process, thread-safe."""
    with _lock:
        if "ops" not in _state:
            _state["ops"], _state["why"] = _load()
            if _state["ops"] is None:
                log.warning("native kernels unavailable: %s", _state["why"])
        return _state["ops"]


def why_not() -> str:
    """Why ops() is None ("" when it is not)."""
    ops()
    return str(_state["why"])
