"""The KV store's configuration (flags, env BIDAW_STORE_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field

from services.runtime.config import check_bounds
from services.runtime.security_config import SecurityConfig

from kv_store.eviction.registry import LIVE_POLICY_NAMES

MAX_DRAIN_S = 3600.0


@dataclass
class StoreConfig(SecurityConfig):
    listen: str = field(default="127.0.0.1:50051", metadata={"help": "gRPC address to serve on"})
    data_dir: str = field(default="./data/kv", metadata={"help": "directory of the SSD tier"})
    dram_bytes: int = field(default=2 << 30, metadata={
        "help": "DRAM tier capacity (counted in whole 4 KiB pages)"})
    ssd_bytes: int = field(default=64 << 30, metadata={
        "help": "SSD tier capacity (left at this default: at most 90%% of what the disk has "
                "room for, its files' bytes plus its free space)"})
    eviction: str = field(default="bidaw-size", metadata={
        "help": "DRAM eviction policy: bidaw-size, bidaw, lru, fifo, queue-aware, or "
                "bidaw-prefetch (bidaw-size, and SSD->DRAM promotion of the sessions it expects "
                "back soon, on SSD time demand loads leave idle)"})
    policy_time_scale: float = field(default=1.0, metadata={
        "help": "the eviction policy's clock runs at wall time / this (a trace replayed at "
                "x0.02 passes 0.02, so think-time priors stay in trace seconds)"})
    lease_seconds: float = field(default=60.0, metadata={"help": "default lease lifetime"})
    promotion_hold_seconds: float = field(default=30.0, metadata={
        "help": "a promoted session stays pinned in DRAM until read, at most this long"})
    promote_concurrency: int = field(default=2, metadata={"help": "SSD->DRAM loads at once"})
    ssd_read_gbps: float = field(default=1.5, metadata={"help": "SSD read bandwidth assumed "
                                                        "for load estimates until measured (GB/s)"})
    ssd_read_gbps_cap: float = field(default=0.0, metadata={
        "help": "cap SSD reads at this rate (GB/s) to emulate a slower disk; 0: no cap"})
    ssd_read_burst_bytes: int = field(default=-1, metadata={
        "help": "bytes a capped disk may read at once after idle time (default: one read, "
                "--ssd-io-bytes; 0: none, every read takes its bytes / the cap, as on a disk)"})
    ssd_direct_io: bool = field(default=True, metadata={
        "help": "O_DIRECT SSD I/O where the filesystem allows it"})
    ssd_io_bytes: int = field(default=8 << 20, metadata={"help": "size of one aligned SSD read"})
    ssd_read_depth: int = field(default=4, metadata={"help": "SSD reads in flight per load"})
    ssd_write_concurrency: int = field(default=2, metadata={
        "help": "sessions whose SSD writes run at once"})
    shm_dir: str = field(default="/dev/shm", metadata={
        "help": "tmpfs holding the DRAM tier (co-located workers read and write it there)"})
    index: str = field(default="embedded", metadata={
        "help": "session index: 'embedded' (rebuilt from the SSD files) or redis://host:port/db"})
    index_namespace: str = field(default="bidaw", metadata={
        "help": "key prefix in a shared index (one per data directory)"})
    scheduler: str = field(default="", metadata={
        "help": "scheduler address(es) to register this shard with at run time, comma separated"})
    advertise: str = field(default="", metadata={
        "help": "address the scheduler and workers should dial (default: the listen address)"})
    metrics_listen: str = field(default="", metadata={
        "help": "host:port for Prometheus /metrics (empty: off)"})
    drain_seconds: float = field(default=20.0, metadata={
        "help": "told to stop (SIGTERM), the store refuses new calls and waits this long at "
                "most for the KV writes and reads in flight and their SSD copies; then it stops"})

    def __post_init__(self):
        if self.eviction not in LIVE_POLICY_NAMES:  # found by the store's start, a traceback
            raise ValueError(f"--eviction must be one of {', '.join(LIVE_POLICY_NAMES)}, not "
                             f"{self.eviction!r}" + (" (it needs the future: `bidaw simulate` "
                                                     "only)" if self.eviction == "belady" else ""))
        check_bounds(self, at_least={"dram_bytes": 0, "ssd_bytes": 0, "promote_concurrency": 1,
                                     "ssd_io_bytes": 1, "ssd_read_depth": 1,
                                     "ssd_write_concurrency": 1, "ssd_read_gbps_cap": 0,
                                     "ssd_read_burst_bytes": -1, "drain_seconds": 0},
                     above={"policy_time_scale": 0, "lease_seconds": 0,
                            "promotion_hold_seconds": 0, "ssd_read_gbps": 0})
        if not self.drain_seconds <= MAX_DRAIN_S:  # infinity: a stop that never ends
            raise ValueError(f"--drain-seconds must be <= {MAX_DRAIN_S:g}, "
                             f"got {self.drain_seconds!r}")
