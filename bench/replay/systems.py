"""The systems under test in `bidaw bench live`: one deployment configuration each. Pure."""
from __future__ import annotations

from dataclasses import dataclass

from bench.replay.sizing import TierSizes


@dataclass(frozen=True)
class System:
    policy: str                # scheduler: bidaw (dual queue, disk-HRRN) or fcfs
    eviction: str              # store's DRAM eviction policy
    about: str
    prefetch_window: int = 1   # fcfs only: SSD loads may start this far behind the head
    sync_loads: bool = False   # fcfs only: dispatch without looking at where KV is; the worker
    #                            reads it between batch steps, stalling the batch (vLLM+LMCache)
    use_store: bool = True     # False: the worker recomputes every prompt
    kv_format: str = "auto"    # what the worker stores: the baselines store K/V; Bidaw lets
    #                            the model's config choose (tensor 6 for MHA models, else K/V)
    ideal: bool = False        # DRAM larger than all KV ever stored
    restore_choice: bool = False  # scheduler --restore-choice on: load or recompute per turn


SYSTEMS: dict[str, System] = {
    "recompute": System("fcfs", "lru", "no KV store: every turn prefills its whole history",
                        use_store=False),
    "fcfs-lru": System("fcfs", "lru", "vLLM + LMCache-style offload: FCFS unaware of SSD, the "
                       "KV read inside the batch step (synchronous connector), LRU",
                       sync_loads=True, kv_format="kv"),
    "fcfs-lru-head": System("fcfs", "lru", "FCFS that loads the head's KV before dispatch "
                            "while the batch keeps decoding, LRU", kv_format="kv"),
    "cachedattention": System("fcfs", "queue-aware", "CachedAttention: FCFS with look-ahead 30 "
                              "prefetch, LRU that spares the next 30 queued", prefetch_window=30,
                              kv_format="kv"),
    "bidaw": System("bidaw", "bidaw", "I/O-aware scheduling + previous-answer-based eviction"),
    "bidaw-sched-only": System("bidaw", "lru", "ablation: Bidaw's scheduler, LRU eviction"),
    "bidaw-evict-only": System("fcfs", "bidaw", "ablation: FCFS+LRU's scheduling and "
                               "synchronous loads, Bidaw eviction", sync_loads=True),
    "bidaw-no-tensor6": System("bidaw", "bidaw", "ablation: Bidaw storing K/V whatever the "
                               "model (the same as bidaw for GQA models)", kv_format="kv"),
    "bidaw-size": System("bidaw", "bidaw-size", "Bidaw with size-aware eviction"),
    "bidaw-promote": System("bidaw", "bidaw-prefetch", "Bidaw-size, and the store promotes "
                            "SSD->DRAM the sessions it expects back soon, on idle disk time"),
    "bidaw-prefetch": System("bidaw", "bidaw-prefetch", "bidaw-promote, and the scheduler "
                             "chooses per turn to load, recompute or both (as the timed "
                             "simulator's bidaw-prefetch)", restore_choice=True),
    "ideal": System("fcfs", "lru", "all KV fits in DRAM", ideal=True),
    "bidaw-restore": System("bidaw", "bidaw", "Bidaw choosing per turn to load its KV from SSD, "
                            "recompute it or both (scheduler/restore_chooser.py)",
                            restore_choice=True),
}
DEFAULT_SYSTEMS = ("recompute", "fcfs-lru", "cachedattention", "bidaw", "bidaw-size", "ideal")
ABLATIONS = ("bidaw-sched-only", "bidaw-evict-only", "bidaw-no-tensor6")
BASELINE_VARIANTS = ("fcfs-lru-head",)


def deployment_kwargs(system: System, sizes: TierSizes, *, model: str, dtype: str = "float32",
                      max_loads: int = 2,
                      max_answer: int = 4096, time_scale: float = 1.0,
                      max_batch: int = 0, min_step_ms: float = 0.0) -> dict:
    """Keyword arguments of services.launch.launcher.LocalDeployment (without data_dir). The store's
    eviction policy runs on trace time (`time_scale`), as the replay does. `max_batch` > 0
    caps the worker's batch, so a busy machine queues turns at the scheduler (where the
    policies act) instead of slowing every running turn; `min_step_ms` > 0 gives every batch
    step that floor, as on an accelerator."""
    store = ["--promote-concurrency", str(max_loads), "--policy-time-scale", f"{time_scale:g}"]
    if sizes.ssd_read_gbps_cap > 0:  # load estimates then match the emulated disk
        store += ["--ssd-read-gbps-cap", f"{sizes.ssd_read_gbps_cap:.6f}",
                  "--ssd-read-gbps", f"{sizes.ssd_read_gbps_cap:.6f}"]
        if sizes.ssd_read_burst_bytes >= 0:
            store += ["--ssd-read-burst-bytes", str(sizes.ssd_read_burst_bytes)]
    scheduler = ["--max-loads", str(max_loads)]
    if system.restore_choice:
        scheduler += ["--restore-choice", "on"]
    if system.policy == "fcfs":
        scheduler += ["--prefetch-window", str(system.prefetch_window)]
        if system.sync_loads:
            scheduler += ["--ssd-aware", "false"]
    worker = ["--max-batch", str(max_batch)] if max_batch > 0 else []
    if system.sync_loads:
        worker += ["--restore-in-step", "true"]
    if system.kv_format != "auto" and system.use_store:
        worker += ["--kv-format", system.kv_format]
    if min_step_ms > 0:
        worker += ["--min-step-ms", f"{min_step_ms:g}"]
    return dict(dram_bytes=str(sizes.ideal_dram_bytes if system.ideal else sizes.dram_bytes),
                ssd_bytes=str(sizes.ssd_bytes), eviction=system.eviction, policy=system.policy,
                model=model, dtype=dtype, use_store=system.use_store, default_max_tokens=max_answer,
                extra_args={"store": store, "scheduler": scheduler, "worker": worker})
