"""The engine as a Ray actor: owns the model and runs turns, streaming events back.

The gRPC service stays a thin shell; the model lives in the actor, so a worker can host actors on
a Ray cluster's GPUs and a dead actor is restarted without taking the service down. Events cross
the Ray boundary as serialized protobuf bytes: nothing code-executing is deserialized.
"""
from __future__ import annotations

import logging

import ray

import services.runtime.tracing as tracing
from services.runtime.gen import common_pb2, compute_worker_pb2

log = logging.getLogger("bidaw.compute_worker")


def resolve_format(name: str, config) -> int:
    """KV_FORMAT_* for the worker flag: 'kv', 'tensor6' or 'auto' (from the model config)."""
    if name == "kv":
        return common_pb2.KV_FORMAT_KV
    if name == "tensor6":
        return common_pb2.KV_FORMAT_TENSOR6
    if name != "auto":
        raise ValueError(f"--kv-format must be auto, kv or tensor6, not {name!r}")
    from compute_worker.tensor_choice import choose_tensor

    return (common_pb2.KV_FORMAT_TENSOR6 if choose_tensor(config) == "tensor6"
            else common_pb2.KV_FORMAT_KV)


class EngineHost:
    """Loads the model and runs the engine; plain class (testable without Ray).
    `EngineActor` is its Ray form."""

    def __init__(self, model_spec: str, store_target: str | None, kv_format: str = "auto",
                 default_max_tokens: int = 256, threads: int = 0, device: str = "",
                 max_batch: int = 16, tls=None, min_step_ms: float = 0.0,
                 restore_in_step: bool = False, cluster_token: str = ""):
        """`tls`, `cluster_token`: the worker's TLSFiles and token, for the actor's channels to
        the KV store (the actor is another process: the worker's process-wide settings do not
        reach it)."""
        import os

        import torch

        from services.runtime.malloc import tune as tune_malloc

        tune_malloc()  # before the model and KV buffers are allocated (see services/runtime/malloc.py)
        tracing.init_tracing("compute-worker")  # the actor is its own process; before any channel
        if tls is not None:
            from services.runtime.grpc_util import configure_tls

            configure_tls(tls)
        if cluster_token:
            from services.runtime.grpc_util import configure_token

            configure_token(cluster_token)

        from compute_worker.engine import Engine
        from compute_worker.kv_io import KVSessionIO
        from compute_worker.kv_shards import KVShards
        from compute_worker.loaders.registry import load_model

        # Ray pins OMP threads to the actor's CPU count (1); the engine wants the cores it is given.
        torch.set_num_threads(threads or os.cpu_count() or 1)
        model, tokenizer = load_model(model_spec, device=device or None)
        self.model_name = model.config.name or model_spec
        fmt = resolve_format(kv_format, model.config)
        # --store "" is the recompute baseline (no store at all); otherwise each session goes to
        # its shard by consistent hash over the shards the scheduler sends with the turn.
        self.use_scheduler_stores = bool(store_target)
        store = KVShards(store_target) if store_target else None
        kv_io = KVSessionIO(store, model, self.model_name, fmt)
        self.engine = Engine(model, tokenizer, kv_io, default_max_tokens, max_batch,
                             min_step_s=min_step_ms / 1000.0, restore_in_step=restore_in_step)
        from compute_worker.prompt_bound import prompt_byte_bound

        self.max_prompt_bytes = prompt_byte_bound(tokenizer, self.engine.max_context)

    def info(self) -> dict:
        model, kv_io = self.engine.model, self.engine.kv_io
        return dict(model=self.model_name, kv_format=kv_io.kv_format,
                    kv_bytes_per_token=kv_io.bytes_per_token, max_context=self.engine.max_context,
                    device=str(model.device.type), max_batch=self.engine.max_batch,
                    running=self.engine.running, max_prompt_bytes=self.max_prompt_bytes)

    def cancel_turn(self, key: str) -> bool:
        """Stop the turn run_turn runs under `key` (its client left)."""
        return self.engine.cancel(key)

    def run_turn(self, request: bytes, carrier: dict | None = None, key: str = ""):
        """Yields ("event", TurnEvent bytes) ... or ("error", message) for a bad request.
        `carrier` holds the caller's trace context (W3C headers), as Ray does not carry it.
        `key`: a unique name for cancel_turn."""
        from compute_worker.prompt import TurnError

        req = compute_worker_pb2.WorkerTurnRequest.FromString(request)
        with tracing.span("worker.turn", parent=tracing.extract(carrier),
                          session=req.turn.session_id, request_id=req.request_id):
            try:
                stores = list(req.kv_stores) if self.use_scheduler_stores else None
                for ids, text, summary in self.engine.run(req.turn, req.since_arrival_s,
                                                          req.queue_s, stores, key):
                    event = common_pb2.TurnEvent(token_ids=ids, text=text)
                    if summary is not None:
                        event.summary.CopyFrom(summary)
                    yield "event", event.SerializeToString()
            except TurnError as exc:
                yield "error", str(exc)


EngineActor = ray.remote(max_restarts=-1)(EngineHost)
