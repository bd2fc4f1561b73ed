"""The KV connector to Bidaw's KV store over gRPC (shared memory on the store's machine).

Reuse: a prompt reuses stored KV only for the longest prefix whose token ids match what the KV
was computed from, of the same model and format; everything after it is recomputed. KV of
another dtype is converted or recomputed (dtype_reuse.py), counted in `dtype_actions` and
logged. Any store failure degrades to recomputation. KV is labelled with its model and, for a
turn with a cache_salt, the salt's digest (kv_label): a turn reads only KV of its own label, so
a session named again under another salt (or none) reads nothing of it, as vLLM's salted
prefix cache shares no block across salts.

A branch (TurnRequest.parent_session_id: a regenerated answer, an edited history, another
conversation with the same beginning) may restore from its parent's KV when that matches more of
the prompt than its own; the turn then writes the session's whole KV from token 0, since the
session holds none of that prefix itself.
"""
from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass

import grpc
import torch

import services.runtime.tracing as tracing
from services.runtime.log_repeats import Reminder, since

from compute_worker import kv_codec
from compute_worker.dtype_reuse import CONVERT, RECOMPUTE, reuse_action
from compute_worker.kv_client import KVClient, StoredKV
from compute_worker.kv_connector import KVConnector, Recompute, Restored, Suffix, fresh_cache
from compute_worker.kv_shards import KVShards

log = logging.getLogger("bidaw.compute_worker")


@dataclass
class _Candidate:
    session_id: str
    store: KVClient
    reuse: int  # prompt tokens its stored KV matches


def kv_label(model_name: str, salt: str) -> str:
    """What the store keys KV by: the model's name, and the cache salt's digest when there is
    one (never the salt itself: the store's catalog and logs need not hold it)."""
    if not salt:
        return model_name
    return f"{model_name}#salt-{hashlib.sha256(salt.encode()).hexdigest()[:16]}"


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def make_connector(store: KVClient | KVShards | None, model, model_name: str,
                   kv_format: int) -> KVConnector:
    """The connector to `store`: one store, KVShards (a session's shard by consistent hash), or
    None (no store: Recompute)."""
    if store is None:
        return Recompute(model, kv_format)
    return StoreConnector(store, model, model_name, kv_format)


class StoreConnector(KVConnector):
    def __init__(self, store: KVClient | KVShards, model, model_name: str, kv_format: int):
        super().__init__(model, kv_format)
        self.store = store
        self.model_name = model_name
        self.dtype_actions: collections.Counter[str] = collections.Counter()  # convert|recompute
        self._write_failure_said = Reminder()

    def _dtype_action(self, session_id: str, stored_dtype: int) -> str:
        action = reuse_action(stored_dtype, self.kv_dtype)
        if action in (CONVERT, RECOMPUTE):
            self.dtype_actions[action] += 1
            log.info("KV of %r is %s, this worker's is %s: %s", session_id,
                     kv_codec.dtype_name(stored_dtype), kv_codec.dtype_name(self.kv_dtype),
                     "converting it" if action == CONVERT else "recomputing it")
        return action

    def _client(self, session_id: str, shards: list[str] | None) -> KVClient | None:
        if isinstance(self.store, KVShards):
            return self.store.client_for(session_id, shards)
        return self.store

    def _candidate(self, session_id: str, prompt: list[int], shards: list[str] | None,
                   label: str) -> _Candidate | None:
        """How much of `prompt` the KV stored for `session_id` matches (None: nothing)."""
        store = self._client(session_id, shards)
        if store is None:
            return None
        try:
            info = store.lookup(session_id)
        except grpc.RpcError as exc:
            log.warning("store lookup failed for %r (%s): recomputing", session_id, exc.code())
            return None
        if (info.tier == kv_codec.TIER_NONE or info.model != label
                or info.format != self.kv_format):
            return None
        if reuse_action(info.dtype, self.kv_dtype) == RECOMPUTE:
            self._dtype_action(session_id, info.dtype)
            return None
        if info.bytes_per_token != self._bytes_per_token(info.dtype):
            return None
        reuse = min(common_prefix(list(info.token_ids), prompt), len(prompt) - 1)
        return _Candidate(session_id, store, reuse) if reuse > 0 else None

    def _bytes_per_token(self, dtype: int) -> int:
        """Bytes per token of this connector's format in KV_DTYPE_* `dtype` (0: unknown)."""
        known = kv_codec.torch_dtype(dtype)
        return kv_codec.bytes_per_token(self.model.config, self.kv_format, known) if known else 0

    def restore(self, session_id: str, prompt: list[int], parent: str = "",
                shards: list[str] | None = None, salt: str = "") -> Restored:
        """The session's own KV, or `parent`'s when that matches more (a tie keeps the own)."""
        fresh = Restored(fresh_cache(self.model, prompt))
        start = time.monotonic()
        got = self._read_matching((session_id, parent), prompt, shards,
                                  kv_label(self.model_name, salt))
        if got is None:
            return fresh
        best, stored, reuse = got
        kv, data, convert_s = self._kv(stored, reuse)
        cache = fresh_cache(self.model, prompt)
        cache.extend(kv)
        from_parent = best.session_id != session_id
        converted = stored.dtype != self.kv_dtype
        prefix6 = b""
        if stored.format == kv_codec.TENSOR6 and (from_parent or converted):
            prefix6 = kv_codec.convert(data, kv_codec.torch_dtype(stored.dtype),
                                       self.model.dtype) if converted else bytes(data)
        return Restored(cache, reuse, stored.tier, stored.format, time.monotonic() - start,
                        convert_s, from_parent, converted, prefix6)

    def read_suffix(self, session_id: str, prompt: list[int], start_token: int,
                    shards: list[str] | None = None, salt: str = "") -> Suffix | None:
        """K/V of the prompt's tokens from `start_token` to the end of the session's own stored
        match, the store reading nothing before (a reversed split: the caller computes the
        beginning meanwhile). None when the match does not reach past `start_token`, or the
        KV is in another dtype (a converted session is rewritten from token 0)."""
        start = time.monotonic()
        got = self._read_matching((session_id,), prompt, shards,
                                  kv_label(self.model_name, salt), start_token)
        if got is None or got[1].dtype != self.kv_dtype:
            return None
        _, stored, reuse = got
        kv, _, convert_s = self._kv(stored, reuse)
        return Suffix(kv, start_token, reuse, stored.tier, stored.format,
                      time.monotonic() - start, convert_s)

    def _read_matching(self, sessions, prompt: list[int], shards: list[str] | None,
                       label: str, start_token: int = 0) -> tuple[_Candidate, StoredKV, int] | None:
        """The stored KV (from `start_token` on) of whichever of `sessions` matches the most of
        `prompt` (the first of equals), with how many prompt tokens it matches; None if none
        matches past `start_token`, or a read fails (recompute)."""
        found = [c for c in (self._candidate(s, prompt, shards, label)
                             for s in dict.fromkeys(filter(None, sessions))) if c]
        if not found:
            return None
        best = max(found, key=lambda c: c.reuse)
        if best.reuse <= start_token:
            return None
        try:
            stored = best.store.read(best.session_id, max_tokens=best.reuse,
                                     start_token=start_token)
        except (grpc.RpcError, IOError) as exc:
            log.warning("KV read of %r failed (%s): recomputing", best.session_id, exc)
            return None
        # The session may have changed between lookup and read: trust only what was read.
        reuse = min(common_prefix(stored.token_ids, prompt[:best.reuse]), len(stored.token_ids))
        if (reuse <= start_token or stored.start_token != start_token
                or stored.format != self.kv_format or stored.model != label
                or stored.bytes_per_token != self._bytes_per_token(stored.dtype)
                or self._dtype_action(best.session_id, stored.dtype) == RECOMPUTE):
            return None
        return best, stored, reuse

    def _kv(self, stored: StoredKV, reuse: int) -> tuple[torch.Tensor, memoryview, float]:
        """K/V [L, 2, H, T, D] of stored tokens [stored.start_token, reuse), the bytes it came
        from, and the seconds converting tensor 6 took (0 for K/V)."""
        data = stored.data[:(reuse - stored.start_token) * stored.bytes_per_token]
        tensor6 = stored.format == kv_codec.TENSOR6
        convert_start = time.monotonic()
        with (tracing.span("worker.tensor6_to_kv", tokens=reuse - stored.start_token,
                           kv_bytes=len(data)) if tensor6 else contextlib.nullcontext()):
            kv = kv_codec.kv_from_bytes(self.model, stored.format, data,
                                        kv_codec.torch_dtype(stored.dtype), stored.start_token)
        return kv, data, time.monotonic() - convert_start if tensor6 else 0.0

    def save(self, session_id: str, tokens: list[int], cache, hidden6: list[torch.Tensor],
             restored: Restored | None = None, shards: list[str] | None = None,
             salt: str = "") -> None:
        """What the turn computed; for a turn restored from its parent, the session's whole KV
        (the restored prefix too), and for one restored from KV of another dtype."""
        label = kv_label(self.model_name, salt)
        if restored is None or restored.rewrites:
            prefix6 = restored.prefix6 if restored is not None else b""
            self._write(session_id, tokens, 0, cache, hidden6, shards, label, prefix6)
        else:
            self._write(session_id, tokens, restored.tokens, cache, hidden6, shards, label)

    def _write(self, session_id: str, tokens: list[int], start: int, cache,
               hidden6: list[torch.Tensor], shards: list[str] | None, label: str,
               prefix6: bytes = b"") -> None:
        """Write the KV of tokens [start, len(cache)) of `tokens` to the store. Tensor 6:
        `hidden6` holds the fed tokens only; `prefix6`, the bytes of those before them that
        this write must include (start 0 with a restored prefix)."""
        end = len(cache)
        store = self._client(session_id, shards)
        if store is None or end <= start:
            return
        if self.kv_format == kv_codec.TENSOR6:
            data = prefix6 + kv_codec.to_bytes(torch.cat(hidden6))  # fed tokens after prefix6
        else:
            data = kv_codec.to_bytes(cache.to_token_major(start, end))
        tracing.set_attributes(kv_bytes=len(data))
        try:
            # Not durable: the reply comes once the KV is in DRAM (pinned there until its SSD
            # copy lands), so the turn's completion does not wait for an fsync.
            store.write(session_id, start, tokens[start:end], self.kv_format,
                        self.bytes_per_token, label, data, durable=False,
                        dtype=self.kv_dtype)
        except grpc.RpcError as exc:  # the answer stands; the next turn recomputes
            held = self._write_failure_said.due()  # (a store refusing all: not a line a turn)
            if held is not None:
                log.warning("KV write of %r failed: %s %s%s", session_id, exc.code(),
                            exc.details(), since(held))
