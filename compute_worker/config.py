"""The compute worker's configuration (flags, env BIDAW_WORKER_*, or YAML)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from services.runtime.config import check_bounds
from services.runtime.security_config import SecurityConfig

DTYPE_CHOICES = ("auto", "float32", "bfloat16")  # --dtype (loaders/dtype_choice.py)
WEIGHT_FORMATS = ("dense", "bf16", "int8", "int4", "q4")  # models/quant.py
WEIGHT_CHOICES = ("auto", *WEIGHT_FORMATS)  # --weights (models/prepare.py)
KV_FORMAT_CHOICES = ("auto", "kv", "tensor6")  # --kv-format (actor.py)
_DEVICE = re.compile(r"(cpu|cuda(:\d+)?)?")
# Ray refuses a smaller object store (ray.init's ValueError, after its start).
RAY_MIN_OBJECT_STORE_BYTES = 75 << 20


@dataclass
class WorkerConfig(SecurityConfig):
    listen: str = field(default="127.0.0.1:50053", metadata={"help": "gRPC address to serve on"})
    store: str = field(default="127.0.0.1:50051", metadata={
        "help": "KV store address (empty: no store, recompute every prompt)"})
    scheduler: str = field(default="", metadata={
        "help": "scheduler address(es) to register with at run time, comma separated"})
    advertise: str = field(default="", metadata={
        "help": "address the scheduler should dial (default: the listen address)"})
    model: str = field(default="smollm2-135m", metadata={
        "help": "model: smollm2-135m, a .gguf file or a Hugging Face checkpoint directory"})
    worker_id: str = field(default="", metadata={"help": "stable id (default: host:port)"})
    kv_format: str = field(default="auto", metadata={
        "help": "auto (chosen from the model config), kv or tensor6"})
    dtype: str = field(default="auto", metadata={
        "help": "model and KV dtype: auto (bfloat16 on CUDA, and on a CPU with AMX-BF16 whose "
                "bfloat16 matmuls give a row the same bits in any batch; else float32), float32 "
                "or bfloat16"})
    # Not vLLM's 0 by default: a small model on a CPU that loops without an end would run for
    # many minutes, past the gateway's request timeout (a 504, which clients retry).
    default_max_tokens: int = field(default=1024, metadata={
        "help": "answer length of a turn that sets none (completions' is OpenAI's 16); 0: until "
                "the model ends it or the context is full, as vLLM"})
    max_batch: int = field(default=16, metadata={"help": "turns decoded together in one batch"})
    prefill_chunk_tokens: int = field(default=512, metadata={
        "help": "prompt tokens one batch step prefills at most, across its turns (a long "
                "prompt takes several steps, and the running decodes advance between them)"})
    min_step_ms: float = field(default=0.0, metadata={
        "help": "every batch step takes at least this long (benchmarks: a GPU step costs about "
                "the same however many slots are filled; a CPU step gets faster with fewer)"})
    restore_in_step: bool = field(default=False, metadata={
        "help": "read a turn's KV between batch steps, stalling every running turn (benchmarks: "
                "the synchronous offload connector of vLLM + LMCache, the FCFS+LRU baseline)"})
    threads: int = field(default=0, metadata={"help": "torch threads (0: all cores)"})
    small_step_threads: int = field(default=1, metadata={
        "help": "torch threads of a batch step of at most 16 tokens (decodes, short prefill "
                "chunks), whose ops are too small to split across cores with profit; 0: --threads"})
    device: str = field(default="", metadata={"help": "cuda or cpu (default: cuda if present)"})
    ray_address: str = field(default="", metadata={
        "help": "Ray cluster to join (default: start a local Ray)"})
    ray_num_cpus: int = field(default=2, metadata={"help": "CPUs of the local Ray"})
    ray_object_store_bytes: int = field(default=200 << 20, metadata={
        "help": "object store of the local Ray"})
    metrics_listen: str = field(default="", metadata={
        "help": "host:port for Prometheus /metrics (empty: off)"})
    weights: str = field(default="dense", metadata={
        "help": "weight format: dense, bf16, int8, int4 (torch's kernels, CPU), q4 (ours: "
                "AVX2) or auto (the fastest to decode here: q4 on an AVX2 or AVX-512 CPU where "
                "its kernels build, else int4; dense elsewhere)"})

    def __post_init__(self):
        if not 1 <= self.prefill_chunk_tokens <= 1 << 16:
            raise ValueError(f"--prefill-chunk-tokens must be between 1 and 65536, "
                             f"not {self.prefill_chunk_tokens}")
        if not 0 <= self.small_step_threads <= 1024:
            raise ValueError(f"--small-step-threads must be between 0 and 1024, "
                             f"not {self.small_step_threads}")
        # All before Ray and the model start: the engine actor would find them only after,
        # in a traceback.
        for flag, value, choices in (("--dtype", self.dtype, DTYPE_CHOICES),
                                     ("--kv-format", self.kv_format, KV_FORMAT_CHOICES),
                                     ("--weights", self.weights, WEIGHT_CHOICES)):
            if value not in choices:
                raise ValueError(f"{flag} must be one of {', '.join(choices)}, not {value!r}")
        if not _DEVICE.fullmatch(self.device):
            raise ValueError(f"--device must be cpu, cuda or cuda:N, not {self.device!r}")
        # The engine actor takes one CPU of the local Ray (a Ray without one waits forever).
        check_bounds(self, at_least={"default_max_tokens": 0, "max_batch": 1, "threads": 0,
                                     "ray_num_cpus": 1, "min_step_ms": 0,
                                     "ray_object_store_bytes": RAY_MIN_OBJECT_STORE_BYTES})
