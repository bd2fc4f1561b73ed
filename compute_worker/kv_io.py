"""Restoring a session's KV from the store before a turn, and saving the turn's new KV after.

Correctness of reuse: a prompt reuses stored KV only for the longest prefix whose token ids match
what the KV was computed from, of the same model and format; everything after it is recomputed.
At least the last prompt token is always computed, since its logits pick the first answer token.
Any store failure degrades to recomputation, never to a wrong answer.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import grpc
import torch

import services.tracing as tracing
from services.gen import common_pb2

from . import kv_codec
from .kv_client import KVClient
from .kv_shards import KVShards

log = logging.getLogger("bidaw.compute_worker")


@dataclass
class Restored:
    cache: object  # KVCache holding the reused prefix
    tokens: int = 0  # prompt tokens whose KV was restored
    tier: int = common_pb2.TIER_NONE
    format: int = common_pb2.KV_FORMAT_UNSPECIFIED
    load_s: float = 0.0  # reading (and converting) the KV
    convert_s: float = 0.0  # tensor 6 -> K/V


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class KVSessionIO:
    """`store`: one KV store client, KVShards (a session's shard by consistent hash), or None
    (no store: every prompt is recomputed)."""

    def __init__(self, store: KVClient | KVShards | None, model, model_name: str,
                 kv_format: int):
        self.store = store
        self.model = model
        self.model_name = model_name
        self.kv_format = kv_format
        self.bytes_per_token = kv_codec.bytes_per_token(model.config, kv_format, model.dtype)

    def _client(self, session_id: str, shards: list[str] | None) -> KVClient | None:
        if isinstance(self.store, KVShards):
            return self.store.client_for(session_id, shards)
        return self.store

    def restore(self, session_id: str, prompt: list[int],
                shards: list[str] | None = None) -> Restored:
        fresh = Restored(self.model.new_cache(len(prompt) + 64))
        store = self._client(session_id, shards)
        if store is None:
            return fresh
        start = time.monotonic()
        try:
            info = store.lookup(session_id)
        except grpc.RpcError as exc:
            log.warning("store lookup failed for %r (%s): recomputing", session_id, exc.code())
            return fresh
        if (info.tier == common_pb2.TIER_NONE or info.model != self.model_name
                or info.format != self.kv_format or info.bytes_per_token != self.bytes_per_token):
            return fresh
        reuse = min(common_prefix(list(info.token_ids), prompt), len(prompt) - 1)
        if reuse <= 0:
            return fresh
        try:
            stored = store.read(session_id, max_tokens=reuse)
        except (grpc.RpcError, IOError) as exc:
            log.warning("KV read of %r failed (%s): recomputing", session_id, exc)
            return fresh
        # The session may have changed between lookup and read: trust only what was read.
        reuse = min(common_prefix(stored.token_ids, prompt[:reuse]), len(stored.token_ids))
        if reuse <= 0 or stored.format != self.kv_format or stored.model != self.model_name:
            return fresh
        data = stored.data[:reuse * stored.bytes_per_token]
        convert_start = time.monotonic()
        if stored.format == common_pb2.KV_FORMAT_TENSOR6:
            with tracing.span("worker.tensor6_to_kv", tokens=reuse, kv_bytes=len(data)):
                kv = kv_codec.kv_from_bytes(self.model, stored.format, data)
        else:
            kv = kv_codec.kv_from_bytes(self.model, stored.format, data)
        convert_s = time.monotonic() - convert_start
        cache = self.model.new_cache(len(prompt) + 64)
        cache.extend(kv)
        return Restored(cache, reuse, stored.tier, stored.format, time.monotonic() - start,
                        convert_s if stored.format == common_pb2.KV_FORMAT_TENSOR6 else 0.0)

    def save(self, session_id: str, tokens: list[int], start: int, cache,
             hidden6: list[torch.Tensor], shards: list[str] | None = None) -> None:
        """Write the KV of tokens [start, len(cache)) of `tokens` to the store."""
        end = len(cache)
        store = self._client(session_id, shards)
        if store is None or end <= start:
            return
        if self.kv_format == common_pb2.KV_FORMAT_TENSOR6:
            data = kv_codec.to_bytes(torch.cat(hidden6))  # fed tokens: exactly [start, end)
        else:
            data = kv_codec.to_bytes(cache.to_token_major(start, end))
        tracing.set_attributes(kv_bytes=len(data))
        try:
            # Not durable: the reply comes once the KV is in DRAM (pinned there until its SSD
            # copy lands), so the turn's completion does not wait for an fsync.
            store.write(session_id, start, tokens[start:end], self.kv_format,
                        self.bytes_per_token, self.model_name, data, durable=False)
        except grpc.RpcError as exc:  # the answer stands; the next turn recomputes
            log.warning("KV write of %r failed: %s %s", session_id, exc.code(), exc.details())
