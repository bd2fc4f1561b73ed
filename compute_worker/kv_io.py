"""Restoring a session's KV from the store before a turn, and saving the turn's new KV after.

Correctness of reuse: a prompt reuses stored KV only for the longest prefix whose token ids match
what the KV was computed from, of the same model and format; everything after it is recomputed.
At least the last prompt token is always computed, since its logits pick the first answer token.
Any store failure degrades to recomputation, never to a wrong answer.

A branch (TurnRequest.parent_session_id: a regenerated answer, an edited history, another
conversation with the same beginning) may restore from its parent's KV when that matches more of
the prompt than its own; the turn then writes the session's whole KV from token 0, since the
session holds none of that prefix itself.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import grpc
import torch

import services.runtime.tracing as tracing
from services.runtime.gen import common_pb2

from compute_worker import kv_codec
from compute_worker.kv_client import KVClient
from compute_worker.kv_shards import KVShards

log = logging.getLogger("bidaw.compute_worker")


@dataclass
class Restored:
    cache: object  # KVCache holding the reused prefix
    tokens: int = 0  # prompt tokens whose KV was restored
    tier: int = common_pb2.TIER_NONE
    format: int = common_pb2.KV_FORMAT_UNSPECIFIED
    load_s: float = 0.0  # reading (and converting) the KV
    convert_s: float = 0.0  # tensor 6 -> K/V
    from_parent: bool = False  # restored from the parent session's KV
    prefix6: bytes = b""  # tensor 6 of the restored prefix, kept for a branch's first save


@dataclass
class _Candidate:
    session_id: str
    store: KVClient
    reuse: int  # prompt tokens its stored KV matches


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

    def _candidate(self, session_id: str, prompt: list[int],
                   shards: list[str] | None) -> _Candidate | None:
        """How much of `prompt` the KV stored for `session_id` matches (None: nothing)."""
        store = self._client(session_id, shards)
        if store is None:
            return None
        try:
            info = store.lookup(session_id)
        except grpc.RpcError as exc:
            log.warning("store lookup failed for %r (%s): recomputing", session_id, exc.code())
            return None
        if (info.tier == common_pb2.TIER_NONE or info.model != self.model_name
                or info.format != self.kv_format or info.bytes_per_token != self.bytes_per_token):
            return None
        reuse = min(common_prefix(list(info.token_ids), prompt), len(prompt) - 1)
        return _Candidate(session_id, store, reuse) if reuse > 0 else None

    def restore(self, session_id: str, prompt: list[int], shards: list[str] | None = None,
                parent: str = "") -> Restored:
        """The KV of the longest prefix of `prompt` stored for the session, or for `parent`
        when that matches more (a tie keeps the session's own)."""
        fresh = Restored(self.model.new_cache(len(prompt) + 64))
        start = time.monotonic()
        found = [c for c in (self._candidate(s, prompt, shards)
                             for s in dict.fromkeys(filter(None, (session_id, parent)))) if c]
        if not found:
            return fresh
        best = max(found, key=lambda c: c.reuse)  # the first of equals: the session's own
        store, reuse = best.store, best.reuse
        try:
            stored = store.read(best.session_id, max_tokens=reuse)
        except (grpc.RpcError, IOError) as exc:
            log.warning("KV read of %r failed (%s): recomputing", best.session_id, exc)
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
        from_parent = best.session_id != session_id
        tensor6 = stored.format == common_pb2.KV_FORMAT_TENSOR6
        return Restored(cache, reuse, stored.tier, stored.format, time.monotonic() - start,
                        convert_s if tensor6 else 0.0, from_parent,
                        bytes(data) if from_parent and tensor6 else b"")

    def save_turn(self, session_id: str, tokens: list[int], restored: Restored, cache,
                  hidden6: list[torch.Tensor], shards: list[str] | None = None) -> None:
        """Save a turn's KV: what it computed, or for a turn restored from its parent the
        session's whole KV (the restored prefix too)."""
        if restored.from_parent:
            self.save(session_id, tokens, 0, cache, hidden6, shards, prefix6=restored.prefix6)
        else:
            self.save(session_id, tokens, restored.tokens, cache, hidden6, shards)

    def save(self, session_id: str, tokens: list[int], start: int, cache,
             hidden6: list[torch.Tensor], shards: list[str] | None = None,
             prefix6: bytes = b"") -> None:
        """Write the KV of tokens [start, len(cache)) of `tokens` to the store. Tensor 6:
        `hidden6` holds the fed tokens only; `prefix6`, the bytes of those before them that
        this write must include (start 0 with a restored prefix)."""
        end = len(cache)
        store = self._client(session_id, shards)
        if store is None or end <= start:
            return
        if self.kv_format == common_pb2.KV_FORMAT_TENSOR6:
            data = prefix6 + kv_codec.to_bytes(torch.cat(hidden6))  # fed tokens after prefix6
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
