"""The engine as a Ray actor: owns the model and runs turns, streaming events back.

The gRPC service stays a thin shell; the model lives in the actor, so a worker can host actors on
a Ray cluster's GPUs and a dead actor is restarted without taking the service down. Events cross
the Ray boundary as serialized protobuf bytes: nothing code-executing is deserialized. This and
service.py are the worker's edge: the only places that parse or build wire messages.
"""
from __future__ import annotations

import dataclasses
import logging
import os

import ray

import services.runtime.tracing as tracing
from services.runtime.gen import common_pb2, compute_worker_pb2

from compute_worker.engine_config import EngineConfig
from compute_worker.turn_summary import PromptCounts, TurnSummary

log = logging.getLogger("bidaw.compute_worker")
# The wire's names, not kv_codec's: this module is also the worker's main process, which has
# no use for torch (importing it there cost ~3 s of every start).
KV, TENSOR6 = common_pb2.KV_FORMAT_KV, common_pb2.KV_FORMAT_TENSOR6


def resolve_format(name: str, config) -> int:
    """KV_FORMAT_* for the worker flag: 'kv', 'tensor6' or 'auto' (from the model config)."""
    if name == "kv":
        return KV
    if name == "tensor6":
        return TENSOR6
    if name != "auto":
        raise ValueError(f"--kv-format must be auto, kv or tensor6, not {name!r}")
    from compute_worker.tensor_choice import choose_tensor

    return TENSOR6 if choose_tensor(config) == "tensor6" else KV


def _configure_process(config: EngineConfig) -> None:
    import torch

    from services.runtime.cluster_auth import configure_token
    from services.runtime.tls import configure_tls
    from services.runtime.malloc import tune as tune_malloc

    tune_malloc()  # before the model and KV buffers are allocated (services/runtime/malloc.py)
    tracing.init_tracing("compute-worker")  # the actor is its own process; before any channel
    if config.tls is not None:
        configure_tls(config.tls)
    if config.cluster_token:
        configure_token(config.cluster_token)
    # Ray pins OMP threads to the actor's CPU count (1); the engine wants the cores it is given.
    torch.set_num_threads(config.threads or os.cpu_count() or 1)


class EngineHost:
    """Loads the model and runs turns through the engine; plain class (testable without Ray).
    `EngineActor` is its Ray form."""

    def __init__(self, config: EngineConfig):
        _configure_process(config)
        from compute_worker.engine import Engine
        from compute_worker.kv_shards import KVShards
        from compute_worker.loaders.device import pick_device, resolve_dtype
        from compute_worker.loaders.registry import load_model
        from compute_worker.models.prepare import prepare_model  # fused projections, format
        from compute_worker.models.quant import weights_label
        from compute_worker.prompt_bound import prompt_byte_bound
        from compute_worker.store_connector import make_connector
        from compute_worker.turn_runner import TurnRunner

        device = config.device or pick_device()
        self.dtype_choice = resolve_dtype(config.dtype, device)
        model, tokenizer = load_model(config.model, device=device, dtype=self.dtype_choice.dtype)
        weights, why = prepare_model(model, config.weights)
        log.info("weights %s (%s)", weights, why)
        # no KV across weight formats: the label names the format (dense: the model's name)
        self.model_name = weights_label(model.config.name or config.model, weights)
        # --store "" is the recompute baseline (no store at all); otherwise each session goes to
        # its shard by consistent hash over the shards the scheduler sends with the turn.
        self.use_scheduler_stores = bool(config.store)
        self._tokenizer_info = None  # /tokenizer_info's fields, made at the first Tokenize
        store = KVShards(config.store) if config.store else None
        connector = make_connector(store, model, self.model_name,
                                   resolve_format(config.kv_format, model.config))
        engine = Engine(model, config.max_batch, max_prefill_tokens=config.prefill_chunk_tokens,
                        min_step_s=config.min_step_ms / 1000.0,
                        restore_in_step=config.restore_in_step,
                        small_step_threads=config.small_step_threads)
        self.runner = TurnRunner(engine, connector, tokenizer, config.default_max_tokens)
        self.speller = self.runner.speller  # logprobs' token bytes
        self.max_prompt_bytes = prompt_byte_bound(tokenizer, self.runner.max_context)

    def info(self) -> dict:
        engine, connector = self.runner.engine, self.runner.connector
        return dict(model=self.model_name, kv_format=connector.kv_format,
                    kv_dtype=connector.kv_dtype, dtype=self.dtype_choice.name,
                    dtype_reason=self.dtype_choice.reason,
                    kv_bytes_per_token=connector.bytes_per_token,
                    max_context=self.runner.max_context, device=str(engine.model.device.type),
                    max_batch=engine.max_batch, running=engine.running,
                    max_prompt_bytes=self.max_prompt_bytes)

    def tokenize(self, request: bytes) -> tuple[str, bytes | str]:
        """("reply", TokenizeReply bytes) or ("error", message): tokenize.py on this tokenizer."""
        from compute_worker.prompt import TurnError
        from compute_worker.tokenize import tokenize, tokenizer_info

        tokenizer = self.runner.tokenizer
        if self._tokenizer_info is None:  # fixed for the actor's life
            self._tokenizer_info = tokenizer_info(tokenizer, self.runner.max_context,
                                                  self.model_name)
        try:
            reply = tokenize(tokenizer, common_pb2.TokenizeRequest.FromString(request),
                             self._tokenizer_info)
        except TurnError as exc:
            return "error", str(exc)
        return "reply", reply.SerializeToString()

    def cancel_turn(self, key: str) -> bool:
        """Stop the turn run_turn runs under `key` (its client left)."""
        return self.runner.cancel(key)

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
                limit = 0 if req.recompute_kv else (req.kv_prefix_tokens or None)
                counts = None  # sent on the next event: the first that carries anything
                for ids, text, extra in self.runner.run(req.turn, req.since_arrival_s,
                                                        req.queue_s, stores, key, limit,
                                                        req.kv_suffix_from):
                    if isinstance(extra, PromptCounts):
                        counts = extra
                        continue
                    event = self._event(ids, text, extra)
                    if counts is not None:
                        event.prompt_tokens, event.cached_tokens = (counts.prompt_tokens,
                                                                    counts.cached_tokens)
                        counts = None
                    yield "event", event.SerializeToString()
            except TurnError as exc:
                yield "error", str(exc)


    def _event(self, ids: list[int], text: str, extra) -> common_pb2.TurnEvent:
        """The wire's TurnEvent; `extra`: None, the token's StepLogprobs, a PromptLogprobs
        (prompt_logprobs.py) or the TurnSummary."""
        event = common_pb2.TurnEvent(token_ids=ids, text=text)
        if isinstance(extra, TurnSummary):
            event.summary.CopyFrom(common_pb2.TurnSummary(**dataclasses.asdict(extra)))
        elif hasattr(extra, "steps"):  # a PromptLogprobs (its module needs torch: not here)
            event.prompt_logprobs_start = extra.start
            event.prompt_logprobs.extend(self._step(s) for s in extra.steps)
        elif extra is not None:
            event.logprobs.append(self._step(extra))
        return event

    def _step(self, step) -> common_pb2.StepLogprobs:
        spell = lambda t, lp: common_pb2.TokenLogprob(  # noqa: E731
            token_id=t, logprob=lp, token=self.speller(t))
        return common_pb2.StepLogprobs(chosen=spell(step.token, step.logprob),
                                       top=[spell(t, lp) for t, lp in step.top])


EngineActor = ray.remote(max_restarts=-1)(EngineHost)
