"""Load or recompute, chosen per turn: the pure decision for a turn whose KV is on SSD.

No I/O, no clocks: every time is a duration in seconds from the decision instant (t = 0).

Notation: n = `kv.tokens` (the history on SSD), q = `compute.new_tokens`, W = `slot_free_s`
(when the GPU has served the turns ahead and could start this one), A = the SSD time of the
loads queued ahead of this one, β = SSD seconds per token of this KV (so the whole KV lands at
A + nβ = `kv.load_s`, the store's estimate). One prefill step costs, as in
bench.sim.cost_profile, its compute (with tensor 6's K/V restore, r per restored token) overlapped
layer by layer with the DRAM→GPU copy of the restored KV:
step(new, ctx, copied) = a + max(b·new + c·(new·ctx + new(new+1)/2) + r·copied, p·copied).

The options and their expected first-token times:

- WAIT_FOR_LOAD: max(A + nβ, W) + step(q, n, n).
- RECOMPUTE: W + step(n + q, 0, 0); the disk is not used.
- SPLIT at k (0 < k < n): load tokens [0, k), recompute [k, n) with the new ones:
  max(A + kβ, W) + step(n − k + q, k, k). At every layer the suffix attends to the prefix's K/V,
  so its prefill cannot start before the prefix has landed; it could overlap only if the load
  streamed layer by layer into the GPU, and the store lands whole records in DRAM. So the prefix
  load overlaps the queue ahead (and, as in WAIT, the PCIe copy), not this turn's own compute:
  SPLIT wins only when the GPU is busy for part of the load, A < W < A + nβ, with k about
  (W − A)/β, the prefix that lands while the GPU serves others anyway. On an idle GPU the time
  is linear in k and an end wins (WAIT or RECOMPUTE).
- SPLIT_REVERSED at k (only with `suffix_loads=True`): recompute [0, k), which needs no KV
  (causal), from W while the SSD loads [k, n); then one step for the new tokens on all n:
  max(W + step(k, 0, 0), A + (n − k)β) + step(q, n, n − k). Here load and compute really run at
  once and meet in the middle. It needs a store that reads a suffix (ReadKV's `start_token`):
  the live scheduler offers it by default (`--restore-suffix-loads`), the timed simulator's
  bidaw-prefetch systems too.
  Piggybacked (`compute.spare_tokens_per_s` σ > 0 with turns running): the beginning is not a
  step of its own but rides on the running batch's decode steps, which are memory-bound and
  leave compute idle (σ: the tokens they compute at no extra step time, per second; the due
  beginnings of earlier turns, `spare_taken_tokens` P, take it first). Only decode steps carry
  it, and until W the GPU prefills the turns ahead: by the time the end lands, L = A + (n − k)β,
  f = min(k, max(σ·max(L − W, 0) − P, 0)) tokens are done for free; the rest,
  r = k − f, is computed in the turn's own step with the new tokens:
  max(L, W) + step(r on f, q on n, copied n − k) — the only GPU time it costs (and stalls).

k is chosen exactly, by evaluating every k at once (numpy, O(n·m) for m turns ahead).

Turns ahead are never delayed. Those ready now are inside W: FCFS serves them before this turn
whatever it chooses. The others wait for their own loads, ready at `ahead_ready_s`; one that
becomes ready at R while a GPU step of this turn runs over [s, e) waits e − R for it. An option
is offered only if it delays the turns ahead in total no more than WAIT's own step does (WAIT is
today's behaviour, always offered). Among those offered: the earliest first token; ties go to
the option using less GPU time. Not modelled, by choice (the first unless asked, below): the
stall any prefill step imposes on the running batch's decodes (the engine's prefill-first rule
does the same for every miss today), the turns behind (FCFS puts this one first), tensor-6
restore FLOPs, and the disk time SPLIT and RECOMPUTE leave to the loads behind (it can only help
them).

The decode stall, when asked for (`stall_weight` λ > 0): every prefill step of this turn stalls
the decodes of the `running` turns of the batch for its GPU time, and a recompute's step is
long. The choice (and each split's k) is then, among the options offered, the least
ttft + λ · running · gpu time (λ = 1: the sum of the latencies it adds; λ = 0, or an empty
batch: the earliest first token).

The disk's side of the same sum (`kv.loads_behind` D > 0, weighed by the same λ): every load
waiting for the disk behind this one starts later by the SSD time this turn takes (nβ for WAIT,
kβ for SPLIT, none for RECOMPUTE), so the cost is ttft + λ · (running · gpu time + D · disk
time). Without it a saturated disk looks free to each turn in turn, while the GPU's stall is
charged: the choice would lean to the resource whose queue it does not see.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WAIT_FOR_LOAD = "wait_for_load"
RECOMPUTE = "recompute"
SPLIT = "split"
SPLIT_REVERSED = "split_reversed"


def _check(owner: str, **values: float) -> None:
    for name, value in values.items():
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"{owner}.{name} must be >= 0, got {value!r}")


@dataclass(frozen=True)
class PrefillCost:
    """One prefill step: a + max(b·new + c·attention pairs + r·copied, p·copied), where
    `copied` restored tokens cross DRAM→GPU."""
    overhead_s: float           # a: per engine step
    s_per_token: float          # b: the linear (matmul) part
    s_per_token_pair: float = 0.0  # c: attention, per (query, key) pair, causal
    copy_s_per_token: float = 0.0  # p: DRAM→GPU copy of restored KV (0: free)
    restore_s_per_token: float = 0.0  # r: tensor 6 → K/V per restored token (0: stored as K/V)

    def __post_init__(self) -> None:
        _check("PrefillCost", overhead_s=self.overhead_s, s_per_token=self.s_per_token,
               s_per_token_pair=self.s_per_token_pair, copy_s_per_token=self.copy_s_per_token,
               restore_s_per_token=self.restore_s_per_token)

    def step_s(self, new, ctx, copied):
        """Seconds of one step computing `new` tokens that attend to `ctx` earlier ones, while
        `copied` restored tokens cross PCIe; scalars or numpy arrays alike."""
        return self.pairs_step_s(new, new * ctx + new * (new + 1) / 2, copied)

    def pairs_step_s(self, new, pairs, copied):
        """`step_s` given the step's (query, key) pairs: for steps computing several spans."""
        compute = (self.s_per_token * new + self.s_per_token_pair * pairs
                   + self.restore_s_per_token * copied)
        return self.overhead_s + np.maximum(compute, self.copy_s_per_token * copied)


@dataclass(frozen=True)
class KVOnSSD:
    """The turn's KV as the store reports it: `load_s` is its load estimate (bytes at the
    measured rate plus the loads queued ahead), `bytes_per_s` that measured rate."""
    tokens: int
    num_bytes: int
    load_s: float
    bytes_per_s: float
    loads_behind: int = 0  # D: loads waiting for the disk after this one (with stall_weight)

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError(f"KVOnSSD.tokens must be >= 1, got {self.tokens!r}")
        if not self.bytes_per_s > 0:
            raise ValueError(f"KVOnSSD.bytes_per_s must be > 0, got {self.bytes_per_s!r}")
        _check("KVOnSSD", num_bytes=self.num_bytes, load_s=self.load_s,
               loads_behind=self.loads_behind)

    @property
    def ahead_s(self) -> float:
        """A: SSD time of the loads ahead (0 when the estimate is below our own bytes' time,
        e.g. a load already part done)."""
        return max(self.load_s - self.num_bytes / self.bytes_per_s, 0.0)

    @property
    def s_per_token(self) -> float:
        """β, such that the last token lands at load_s."""
        return (self.load_s - self.ahead_s) / self.tokens


@dataclass(frozen=True)
class ComputeSide:
    cost: PrefillCost
    new_tokens: int                 # q: the turn's new prompt tokens
    slot_free_s: float = 0.0        # W: when the turns ahead leave the GPU to this one
    ahead_ready_s: tuple[float, ...] = ()  # when each turn ahead still loading becomes ready
    running: int = 0                # turns decoding in the batch (their decodes wait out a prefill)
    spare_tokens_per_s: float = 0.0  # σ: prefill tokens the decode steps compute for free
    spare_taken_tokens: float = 0.0  # P: earlier piggybacked beginnings, served first

    def __post_init__(self) -> None:
        _check("ComputeSide", new_tokens=self.new_tokens, slot_free_s=self.slot_free_s,
               running=self.running, spare_tokens_per_s=self.spare_tokens_per_s,
               spare_taken_tokens=self.spare_taken_tokens)
        for r in self.ahead_ready_s:
            _check("ComputeSide", ahead_ready_s=r)


@dataclass(frozen=True)
class Option:
    name: str
    k: int          # the split point: SPLIT loads [0, k); SPLIT_REVERSED recomputes [0, k)
    ttft_s: float   # expected first-token time (inf: not possible, e.g. no k for n = 1)
    gpu_s: float    # GPU time of this turn's steps
    delay_s: float  # total delay its GPU steps impose on the turns ahead
    offered: bool   # delays the turns ahead no more than WAIT_FOR_LOAD does


@dataclass(frozen=True)
class RestoreChoice:
    best: Option
    options: tuple[Option, ...]  # every option considered, WAIT_FOR_LOAD first (for reports)

    def __getitem__(self, name: str) -> Option:
        return next(o for o in self.options if o.name == name)


def _delay(starts: np.ndarray, ends: np.ndarray, ready: np.ndarray) -> np.ndarray:
    """Per candidate: sum over turns ahead ready at R inside [start, end) of end − R."""
    if ready.size == 0:
        return np.zeros(np.shape(starts))
    s, e = np.asarray(starts)[..., None], np.asarray(ends)[..., None]
    return np.where((s <= ready) & (ready < e), e - ready, 0.0).sum(axis=-1)


def _pick(name: str, ks: np.ndarray, ttft: np.ndarray, gpu: np.ndarray, delay: np.ndarray,
          allowed: float, last: bool, penalty: np.ndarray) -> Option:
    """The best k: the least ttft + `penalty` (the others' wait it adds, weighed; the earliest
    first token when 0) among those delaying no more than `allowed`; ties go to the least GPU
    time, then (`last`) the larger k."""
    if ks.size == 0:
        return Option(name, 0, float("inf"), 0.0, 0.0, False)
    ok = delay <= allowed + 1e-12
    if not ok.any():
        i = int(np.argmin(ttft))
        return Option(name, int(ks[i]), float(ttft[i]), float(gpu[i]), float(delay[i]), False)
    order = np.lexsort((-ks if last else ks, gpu, ttft + penalty, ~ok))  # last key first
    i = int(order[0])
    return Option(name, int(ks[i]), float(ttft[i]), float(gpu[i]), float(delay[i]), True)


def decide_restore(kv: KVOnSSD, compute: ComputeSide, suffix_loads: bool = False,
                   stall_weight: float = 0.0) -> RestoreChoice:
    """The option with the earliest expected first token that does not delay the turns ahead
    (see the module's docstring for the model). `suffix_loads`: the store can read a suffix,
    so SPLIT_REVERSED is considered. `stall_weight` λ: weigh in the running decodes' stall and
    the loads behind on the disk, ttft + λ · (running · gpu time + loads_behind · disk time)."""
    _check("decide_restore", stall_weight=stall_weight)
    stall = stall_weight * compute.running
    n, q, w, cost = kv.tokens, compute.new_tokens, compute.slot_free_s, compute.cost
    a, beta = kv.ahead_s, kv.s_per_token
    disk = stall_weight * kv.loads_behind * beta  # per token read
    ready = np.asarray(compute.ahead_ready_s, dtype=float)
    one = np.zeros(1)

    start = max(kv.load_s, w)
    gpu = float(cost.step_s(q, n, n))
    wait = Option(WAIT_FOR_LOAD, n, start + gpu, gpu,
                  float(_delay(one + start, one + start + gpu, ready)[0]), True)
    penalty = {WAIT_FOR_LOAD: stall * gpu + disk * n}

    gpu = float(cost.step_s(n + q, 0, 0))
    recompute = _pick(RECOMPUTE, np.zeros(1, dtype=int), one + w + gpu, one + gpu,
                      _delay(one + w, one + w + gpu, ready), wait.delay_s, False,
                      one + stall * gpu)
    penalty[RECOMPUTE] = stall * recompute.gpu_s

    ks = np.arange(1, n)
    start_k = np.maximum(a + ks * beta, w)
    gpu_k = cost.step_s(n - ks + q, ks, ks)
    split = _pick(SPLIT, ks, start_k + gpu_k, gpu_k, _delay(start_k, start_k + gpu_k, ready),
                  wait.delay_s, True, stall * gpu_k + disk * ks)
    penalty[SPLIT] = stall * split.gpu_s + disk * split.k
    options = [wait, split, recompute]

    if suffix_loads and compute.spare_tokens_per_s > 0 and compute.running > 0:
        lands = a + (n - ks) * beta
        riding = np.maximum(lands - w, 0.0)  # decode time before the end lands (W: prefills)
        free = np.clip(compute.spare_tokens_per_s * riding - compute.spare_taken_tokens, 0, ks)
        r = ks - free
        start2 = np.maximum(lands, w)
        pairs = r * free + r * (r + 1) / 2 + q * n + q * (q + 1) / 2
        second = cost.pairs_step_s(r + q, pairs, n - ks)
        options.insert(2, _pick(SPLIT_REVERSED, ks, start2 + second, second,
                                _delay(start2, start2 + second, ready), wait.delay_s, False,
                                stall * second + disk * (n - ks)))
        rev = options[2]
        penalty[SPLIT_REVERSED] = stall * rev.gpu_s + disk * (n - rev.k)
    elif suffix_loads:
        first = cost.step_s(ks, 0, 0)
        start2 = np.maximum(w + first, a + (n - ks) * beta)
        second = cost.step_s(q, n, n - ks)
        delay = _delay(w + 0 * ks, w + first, ready) + _delay(start2, start2 + second, ready)
        options.insert(2, _pick(SPLIT_REVERSED, ks, start2 + second, first + second, delay,
                                wait.delay_s, False, stall * (first + second) + disk * (n - ks)))
        rev = options[2]
        penalty[SPLIT_REVERSED] = stall * rev.gpu_s + disk * (n - rev.k)
    best = min((o for o in options if o.offered),
               key=lambda o: (o.ttft_s + penalty[o.name], o.gpu_s))
    return RestoreChoice(best, tuple(options))
