"""The systems the timed simulator compares, by name, and their ablations.

Both FCFS baselines prefetch: SSD loads start in arrival order among the next 30 queued requests,
so fcfs-lru and cachedattention differ only in eviction, as in the cache-only table. The
baselines hold no lease on a queued request's KV (a DRAM hit can be evicted before it runs and
is then loaded again — what CachedAttention's queue-aware eviction prevents for the next 30);
Bidaw leases the KV of every queued request, as the KV store service does. `bidaw-restore` is
Bidaw choosing, per turn whose KV is on SSD, to load it, recompute it or both (bench.sim.restore).
`bidaw-prefetch` is that choice (with the decode stall weighed in, as bidaw-restore-stall) plus
predictive promotion (bench.sim.promote) on bidaw-prefetch's eviction (bidaw-size's ranking),
with the reversed split offered (a store that reads a history's end: `suffix_loads`) and its
recomputed beginning riding on the decode steps' idle compute (`piggyback`, bench.sim.engine);
`-no-piggyback` and `-prefix-only` (neither: bidaw-prefetch before them) take them off.
`fcfs-lru-head` loads only when a request reaches the head (the GPU keeps running the batch).

A system = a scheduling queue (scheduler.policy) + an eviction policy (kv_store.eviction) + the
tensor it stores + how much cache it has. Bidaw's mechanisms switch off by suffix, in any order:
`-no-io` (FCFS with CachedAttention's look-ahead prefetch instead of the dual queue),
`-no-answer` (queue-aware LRU instead of answer-based eviction), `-no-tensor6` (store K/V),
`-prefix-only`, `-no-piggyback` (above).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from bench.sim.cost_profile import CostModel
from bench.sim.tiers import TieredKV
from kv_store.eviction.ledger import TierLedger
from kv_store.eviction.registry import make_policy

NO_CACHE = "none"          # recompute every history
TIERED = "tiered"          # DRAM performance layer + SSD capacity layer
UNBOUNDED = "unbounded"    # every KV in DRAM (the ideal)


@dataclass(frozen=True)
class SystemSpec:
    name: str
    cache: str
    queue: str = "fcfs"          # scheduler.policy name: "fcfs" | "bidaw"
    prefetch_window: int = 1     # fcfs only: loads start among the first N queued (1 = at the head)
    eviction: str = "lru"        # kv_store.eviction name
    tensor: str = "kv"           # "kv" | "auto" (the model's choice: tensor 6 for MHA)
    lookahead: int = 30          # sessions of the next queued requests shown to the eviction policy
    pin_queued: bool = False     # lease the KV of every queued request (else only loads + running)
    restore_choice: bool = False  # per turn on SSD: load, recompute or split (bench.sim.restore)
    stall_weight: float = 0.0     # restore choice: weight of the decode stall it imposes
    promote: bool = False         # predictive promotion SSD -> DRAM (bench.sim.promote)
    choose_at_arrival: bool = False  # restore choice: also ask at arrival (bench.sim.restore)
    disk_behind: bool = False     # restore choice: weigh the loads waiting behind on the disk
    suffix_loads: bool = False    # restore choice: the store reads a history's end too (reversed split)
    piggyback: bool = False       # a reversed split's beginning rides on the decode steps


BASE_SYSTEMS: dict[str, SystemSpec] = {s.name: s for s in (
    SystemSpec("recompute", NO_CACHE),
    SystemSpec("fcfs-lru", TIERED, "fcfs", 30, "lru", "kv"),
    SystemSpec("fcfs-lru-head", TIERED, "fcfs", 1, "lru", "kv"),
    SystemSpec("cachedattention", TIERED, "fcfs", 30, "queue-aware", "kv"),
    SystemSpec("bidaw", TIERED, "bidaw", 1, "bidaw", "auto", pin_queued=True),
    SystemSpec("bidaw-size", TIERED, "bidaw", 1, "bidaw-size", "auto", pin_queued=True),
    SystemSpec("bidaw-restore", TIERED, "bidaw", 1, "bidaw", "auto", pin_queued=True,
               restore_choice=True),
    SystemSpec("bidaw-restore-stall", TIERED, "bidaw", 1, "bidaw", "auto", pin_queued=True,
               restore_choice=True, stall_weight=0.1),
    SystemSpec("bidaw-prefetch", TIERED, "bidaw", 1, "bidaw-prefetch", "auto", pin_queued=True,
               restore_choice=True, stall_weight=0.3, promote=True, choose_at_arrival=True,
               disk_behind=True, suffix_loads=True, piggyback=True),
    SystemSpec("ideal", UNBOUNDED, "fcfs", 1, "lru", "auto"),
    SystemSpec("ideal-kv", UNBOUNDED, "fcfs", 1, "lru", "kv"),
)}

_ABLATIONS = {
    "-no-io": dict(queue="fcfs", prefetch_window=30),
    "-no-answer": dict(eviction="queue-aware"),
    "-no-tensor6": dict(tensor="kv"),
    "-prefix-only": dict(suffix_loads=False, piggyback=False),
    "-no-piggyback": dict(piggyback=False),
}

DEFAULT_SYSTEMS = ("recompute", "fcfs-lru", "cachedattention", "bidaw", "bidaw-size", "ideal")


def system_spec(name: str) -> SystemSpec:
    """The spec for `name`: a base system, or a Bidaw variant with ablation suffixes."""
    if name in BASE_SYSTEMS:
        return BASE_SYSTEMS[name]
    rest, changes = name, {}
    while rest not in BASE_SYSTEMS:
        for suffix, change in _ABLATIONS.items():
            if rest.endswith(suffix):
                rest = rest[: -len(suffix)]
                changes.update(change)
                break
        else:
            known = ", ".join(list(BASE_SYSTEMS) + [f"bidaw{s}" for s in _ABLATIONS])
            raise ValueError(f"unknown system {name!r}; known: {known} (suffixes combine)")
    base = BASE_SYSTEMS[rest]
    if not base.name.startswith("bidaw"):
        raise ValueError(f"ablation suffixes apply to bidaw systems only, not {rest!r}")
    return replace(base, name=name, **changes)


def make_tiers(spec: SystemSpec, cost: CostModel, policy_kwargs: dict) -> TieredKV | None:
    """The KV tiers of `spec` (None: it caches nothing). Unbounded DRAM evicts nothing, so its
    policy only keeps the ledger's order; a tiered system's SSD copy is evicted LRU."""
    if spec.cache == NO_CACHE:
        return None
    if spec.cache == UNBOUNDED:
        return TieredKV(TierLedger(make_policy(spec.eviction), None), None)
    policy = make_policy(spec.eviction, cost.dram_bytes, cost.watermark_bytes,
                         **policy_kwargs.get(spec.eviction, {}))
    return TieredKV(TierLedger(policy, cost.dram_bytes, cost.watermark_bytes),
                    TierLedger(make_policy("lru"), cost.ssd_bytes))
