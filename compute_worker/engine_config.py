"""What the engine actor is built from: the worker's settings that reach the model's process."""
from __future__ import annotations

from dataclasses import dataclass

from services.runtime.cluster_auth import cluster_token
from services.runtime.tls import tls_files
from services.runtime.membership_auth import config_token
from services.runtime.tls import TLSFiles

from compute_worker.config import WorkerConfig


@dataclass(frozen=True)
class EngineConfig:
    model: str  # a model spec (loaders/registry.py)
    store: str  # KV store shards, comma separated ("": no store, recompute every prompt)
    kv_format: str = "auto"  # auto | kv | tensor6
    dtype: str = "auto"  # auto | float32 | bfloat16 (loaders/dtype_choice.py)
    default_max_tokens: int = 1024  # 0: to the context's end
    max_batch: int = 16
    prefill_chunk_tokens: int = 512
    min_step_ms: float = 0.0
    restore_in_step: bool = False
    threads: int = 0  # torch threads (0: all cores)
    small_step_threads: int = 1  # threads of a step of few tokens (step_threads.py; 0: all)
    device: str = ""  # cuda | cpu ("": cuda if present)
    # The actor is another process: the worker's process-wide TLS and token do not reach it.
    tls: TLSFiles | None = None
    cluster_token: str = ""
    weights: str = "dense"  # dense | bf16 | int8 | int4 | q4 | auto (compute_worker/models/prepare.py)

    @classmethod
    def from_worker(cls, config: WorkerConfig) -> "EngineConfig":
        """The engine's part of the worker's config, with the TLS files and cluster token the
        worker's process uses (call after they are configured)."""
        return cls(model=config.model, store=config.store, kv_format=config.kv_format,
                   dtype=config.dtype,
                   default_max_tokens=config.default_max_tokens, max_batch=config.max_batch,
                   prefill_chunk_tokens=config.prefill_chunk_tokens,
                   min_step_ms=config.min_step_ms, restore_in_step=config.restore_in_step,
                   threads=config.threads, small_step_threads=config.small_step_threads,
                   device=config.device, tls=tls_files(),
                   cluster_token=config_token(config) or cluster_token(),
                   weights=config.weights)  # checked by WorkerConfig

