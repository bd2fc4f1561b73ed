"""The KV store's configuration (flags, env BIDAW_STORE_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StoreConfig:
    listen: str = field(default="127.0.0.1:50051", metadata={"help": "gRPC address to serve on"})
    data_dir: str = field(default="./data/kv", metadata={"help": "directory of the SSD tier"})
    dram_bytes: int = field(default=2 << 30, metadata={"help": "DRAM tier capacity"})
    ssd_bytes: int = field(default=64 << 30, metadata={"help": "SSD tier capacity"})
    eviction: str = field(default="lru", metadata={"help": "DRAM eviction policy by name"})
    lease_seconds: float = field(default=60.0, metadata={"help": "default lease lifetime"})
    promote_concurrency: int = field(default=2, metadata={"help": "SSD->DRAM loads at once"})
    ssd_read_gbps: float = field(default=1.5, metadata={"help": "SSD read bandwidth assumed "
                                                        "for load estimates (GB/s)"})
    metrics_listen: str = field(default="", metadata={
        "help": "host:port for Prometheus /metrics (empty: off)"})
