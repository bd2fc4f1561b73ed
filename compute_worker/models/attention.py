"""Attention over a packed batch: each sequence attends over its own KVCache.

Two ways to run a layer's attention for the sequences of one batch, picked per batch by the pure
rule `fused_rows` (device and batch shape):
- the loop: one scaled_dot_product_attention per sequence over its cache view, nothing padded,
  the fused causal kernel for a fresh prefill;
- the fused call: the chosen sequences' keys padded into one [B, S, H, D] tensor and their
  queries into [B, H, g*T, D], one masked SDPA for all of them. Grouped-query heads need no K/V
  copy: the g query heads sharing a K/V head are g more query rows of that head (row j*T + t).
On CUDA one call replaces a decode batch's B attention calls per layer (each sequence's cache
append stays its own copy). On the CPU the loop wins at every batch measured (4-64 decodes over
100-1,000 keys: the fused call 1.1-5x slower, its padding copy and masked kernel cost more than
the per-call overhead saved), so it loops.

Block-aligned prefill (`Packed.block` > 0, models that round to bf16: kv_blocks.py): a chunk's
queries attend block by block, each block of `block` positions aligned at an absolute multiple
of it, over exactly the keys up to its end. A block's output then depends on its tokens and the
keys before it only, not on how the prefill was cut into chunks, so KV computed across turns
(prompt, decodes, the next prompt) and KV recomputed in one pass agree bit for bit.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from compute_worker.models.kv_cache import KVCache

_forced: str | None = None  # "loop" | "fused" while `forced_path` is active (tests, benchmarks)


@dataclass
class _Seq:
    cache: KVCache
    sl: slice  # rows of this sequence in the packed batch
    mask: torch.Tensor | None  # [T, P+T] bool, or None when is_causal/no mask suffices
    is_causal: bool
    blocks: list["_Block"] | None = None  # a block-aligned prefill's blocks (None: whole)


@dataclass
class _Block:
    """Queries lo..hi-1 of a chunk attend over keys 0..end-1 (causal within the block)."""
    lo: int
    hi: int
    end: int
    mask: torch.Tensor | None  # [hi-lo, end] bool; None: square causal (the block at 0)


def _blocks(P: int, T: int, block: int, device) -> list[_Block]:
    """A chunk at positions P..P+T-1 cut at the aligned edges (multiples of `block`)."""
    edges = [P, *range(P - P % block + block, P + T, block), P + T]
    out = []
    for start, stop in zip(edges, edges[1:]):
        mask = None if start == 0 else torch.arange(stop, device=device)[None, :] <= (
            start + torch.arange(stop - start, device=device)[:, None])
        out.append(_Block(start - P, stop - P, stop, mask))
    return out


def fused_rows(device_type: str, new_tokens: list[int], forced: str | None = None) -> list[int]:
    """Which sequences (indexes) share the one fused attention call; the others loop.

    Decodes (one new token) are where batching puts many sequences and one call saves most; a
    prefill is one large call of its own already, and padding every decode's queries to its
    length would multiply the work."""
    if forced is not None:
        return list(range(len(new_tokens))) if forced == "fused" else []
    if device_type != "cuda":
        return []
    decodes = [i for i, t in enumerate(new_tokens) if t == 1]
    return decodes if len(decodes) > 1 else []


@contextlib.contextmanager
def forced_path(path: str):
    """Run every batch's attention as "loop" or "fused" inside the block (one thread's forward:
    tests comparing the two, the GPU benchmark timing them)."""
    global _forced
    if path not in ("loop", "fused"):
        raise ValueError(f"attention path must be 'loop' or 'fused', not {path!r}")
    before, _forced = _forced, path
    try:
        yield
    finally:
        _forced = before


class _Fused:
    """Index and mask bookkeeping of the fused call, shared by every layer of one forward."""

    def __init__(self, starts: list[int], lengths: list[int], first_rows: list[int],
                 device: torch.device) -> None:
        B, T = len(lengths), max(lengths)
        self.batch, self.width = B, T
        tok, pad = [], []
        for b, (row, n) in enumerate(zip(first_rows, lengths)):
            tok.append(torch.arange(row, row + n))
            pad.append(torch.arange(b * T, b * T + n))
        self.token_rows = torch.cat(tok).to(device)  # rows in the packed batch
        self.padded_rows = torch.cat(pad).to(device)  # the same rows in the [B*T] padded queries
        P = torch.tensor(starts, device=device)[:, None, None]
        S = P + torch.tensor(lengths, device=device)[:, None, None]
        keys = torch.arange(int(max(s + n for s, n in zip(starts, lengths))), device=device)
        # query t of sequence b (position P+t) sees keys 0..P+t of its own; a padding query
        # (t >= its length) sees key 0 only, so no row is all masked (its output is dropped)
        self.mask = (keys <= P + torch.arange(T, device=device)[None, :, None]) & (keys < S)
        self._by_group: dict[int, torch.Tensor] = {}

    def mask_for(self, group: int) -> torch.Tensor:
        """[B, 1, group*T, S]: query row j*T + t of a K/V head is query head j's token t."""
        if group not in self._by_group:
            B, T, S = self.mask.shape
            self._by_group[group] = self.mask[:, None, None].expand(B, 1, group, T, S).reshape(
                B, 1, group * T, S)
        return self._by_group[group]


def new_token_ids(batch: list[tuple[torch.Tensor, KVCache]]) -> list[torch.Tensor]:
    """Each sequence's new token ids, 1-D long; refuses an empty batch, a KVCache twice in it
    (the layers' forward and the native one alike)."""
    if not batch:
        raise ValueError("empty batch")
    if len({id(c) for _, c in batch}) != len(batch):
        raise ValueError("each sequence needs a KVCache of its own: the same KVCache appears "
                         "twice in one batch")
    ids = [torch.as_tensor(t, dtype=torch.long).reshape(-1) for t, _ in batch]
    if any(t.numel() == 0 for t in ids):
        raise ValueError("a sequence in the batch has no new tokens")
    return ids


class Packed:
    """Token ids, absolute positions and attention bookkeeping for one batched forward.
    `block`: attend prefill chunks in aligned blocks of this many positions (0: whole chunks)."""

    def __init__(self, batch: list[tuple[torch.Tensor, KVCache]], device: torch.device,
                 block: int = 0) -> None:
        self.block = block
        ids, pos, starts, self.seqs = [], [], [], []
        n, self.max_position = 0, 0
        for tokens, (_, cache) in zip(new_token_ids(batch), batch):
            T, P = tokens.numel(), cache.length
            cache.reserve(T)  # grow once up front instead of inside the layer loop
            ids.append(tokens)
            pos.append(torch.arange(P, P + T))
            starts.append(P)
            self.max_position = max(self.max_position, P + T - 1)  # host int: no device sync
            blocks = _blocks(P, T, block, device) if block and T > 1 else None
            if T == 1 or blocks is not None:  # one query sees every key; blocks: their masks
                mask, causal = None, False
            elif P == 0:  # square causal mask: SDPA builds it (top-left aligned == correct here)
                mask, causal = None, True
            else:  # chunked prefill: query i (position P+i) sees keys 0..P+i
                mask = torch.arange(P + T, device=device)[None, :] <= (
                    P + torch.arange(T, device=device)[:, None])
                causal = False
            self.seqs.append(_Seq(cache, slice(n, n + T), mask, causal, blocks))
            n += T
        self.num_tokens = n
        self.ids = torch.cat(ids).to(device)
        self.positions = torch.cat(pos).to(device)
        fused = fused_rows(torch.device(device).type, [len(p) for p in pos], _forced)
        self.fused_seqs = [self.seqs[i] for i in fused]
        self.looped_seqs = [s for i, s in enumerate(self.seqs) if i not in set(fused)]
        self.fused = _Fused([starts[i] for i in fused], [len(pos[i]) for i in fused],
                            [self.seqs[i].sl.start for i in fused], device) if fused else None
        # a lone decode (one sequence, one token): the whole batch is that sequence's rows
        self.single = self.seqs[0] if n == 1 and not fused else None


def packed_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: Packed,
                     layer: int) -> torch.Tensor:
    """q [N, Hq, D], k/v [N, Hkv, D] for the new tokens -> attention output [N, Hq*D].

    Appends k/v to each sequence's cache (layer `layer`) and attends over the cache.
    """
    N, Hq, D = q.shape
    if packed.single is not None:  # no slicing into rows or output buffer: same bits, fewer ops
        return _one(q, k, v, packed.single, layer).reshape(N, Hq * D)
    out = q.new_empty(N, Hq, D)
    for s in packed.looped_seqs:
        if s.blocks is not None:
            out[s.sl] = _blockwise(q[s.sl], k[s.sl], v[s.sl], s, layer)
        else:
            out[s.sl] = _one(q[s.sl], k[s.sl], v[s.sl], s, layer)
    if packed.fused is not None:
        _fused(q, k, v, packed, layer, out)
    return out.view(N, Hq * D)


def _one(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: _Seq, layer: int) -> torch.Tensor:
    """One sequence: q [T, Hq, D], k/v [T, Hkv, D] -> [T, Hq, D]."""
    Hq = q.shape[1]
    group = Hq // k.shape[1]
    K, V = s.cache.append(layer, k.transpose(0, 1), v.transpose(0, 1))
    # 4-D inputs reach the fused (flash) kernels; 3-D ones fall back to the math path on CPU.
    # Decode: enable_gqa reads the shared K/V in place. Prefill (T>1): the fused causal kernel
    # wants equal head counts and the K/V copy is cheap next to the T x S attention.
    if group > 1 and q.shape[0] > 1:
        K, V = K.repeat_interleave(group, 0), V.repeat_interleave(group, 0)
    o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], K[None], V[None],
                                       attn_mask=s.mask, is_causal=s.is_causal,
                                       enable_gqa=K.shape[0] != Hq)
    return o[0].transpose(0, 1)


def _blockwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s: _Seq,
               layer: int) -> torch.Tensor:
    """One prefill chunk, q [T, Hq, D]: the queries of each of its blocks attend over the keys
    up to the block's last position. (The engine starts a chunk on an edge (sequence.py); one
    that starts elsewhere runs a partial first block: deterministic, not block-aligned KV.)"""
    T, Hq, D = q.shape
    group = Hq // k.shape[1]
    K, V = s.cache.append(layer, k.transpose(0, 1), v.transpose(0, 1))
    if group > 1:  # once for the chunk; each block takes a prefix of it
        K, V = K.repeat_interleave(group, 0), V.repeat_interleave(group, 0)
    qh, out = q.transpose(0, 1), q.new_empty(Hq, T, D)
    for b in s.blocks:
        out[:, b.lo:b.hi] = F.scaled_dot_product_attention(
            qh[None, :, b.lo:b.hi], K[None, :, :b.end], V[None, :, :b.end], attn_mask=b.mask,
            is_causal=b.mask is None)[0]
    return out.transpose(0, 1)


def _fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: Packed, layer: int,
           out: torch.Tensor) -> None:
    """The fused sequences' attention in one SDPA call, written into their rows of `out`."""
    f, (_, Hq, D), Hkv = packed.fused, q.shape, k.shape[1]
    group = Hq // Hkv
    Ks, Vs = [], []
    for s in packed.fused_seqs:
        K, V = s.cache.append(layer, k[s.sl].transpose(0, 1), v[s.sl].transpose(0, 1))
        Ks.append(K.transpose(0, 1))  # [S_i, Hkv, D] views of the cache
        Vs.append(V.transpose(0, 1))
    Kp = pad_sequence(Ks, batch_first=True).transpose(1, 2)  # [B, Hkv, S, D]
    Vp = pad_sequence(Vs, batch_first=True).transpose(1, 2)
    B, T = f.batch, f.width
    qp = q.new_zeros(B * T, Hq, D).index_copy_(0, f.padded_rows, q[f.token_rows])
    qp = qp.view(B, T, Hkv, group, D).permute(0, 2, 3, 1, 4).reshape(B, Hkv, group * T, D)
    o = F.scaled_dot_product_attention(qp, Kp, Vp, attn_mask=f.mask_for(group))
    o = o.view(B, Hkv, group, T, D).permute(0, 3, 1, 2, 4).reshape(B * T, Hq, D)
    out[f.token_rows] = o[f.padded_rows]
