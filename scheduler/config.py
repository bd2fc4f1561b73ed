"""The scheduler's configuration (flags, env BIDAW_SCHEDULER_*, or YAML)."""
from __future__ import annotations

from dataclasses import dataclass, field

from services.runtime.config import check_bounds
from services.runtime.security_config import SecurityConfig

from scheduler.policy.registry import QUEUE_POLICIES


@dataclass
class SchedulerConfig(SecurityConfig):
    listen: str = field(default="127.0.0.1:50052", metadata={"help": "gRPC address to serve on"})
    store: str = field(default="127.0.0.1:50051", metadata={
        "help": "KV store shard addresses, comma separated (more may register at run time)"})
    workers: list[str] = field(default_factory=lambda: ["127.0.0.1:50053"], metadata={
        "help": "compute worker addresses, comma separated (more may register at run time)"})
    heartbeat_s: float = field(default=2.0, metadata={
        "help": "registered members heartbeat this often; 3 missed and they are dropped"})
    policy: str = field(default="bidaw", metadata={"help": "scheduling policy: fcfs or bidaw"})
    prefetch_window: int = field(default=1, metadata={
        "help": "fcfs only: start SSD loads for the first N queued turns (1: at the head; "
                "30: CachedAttention's look-ahead)"})
    ssd_aware: bool = field(default=True, metadata={
        "help": "fcfs only: hold a turn whose KV is on SSD until the store has loaded it (false: "
                "dispatch it at once and let the worker read the SSD inside its batch step, as "
                "vLLM with LMCache's synchronous connector does; pair with the worker's "
                "--restore-in-step true)"})
    max_loads: int = field(default=2, metadata={"help": "SSD->DRAM loads in flight at once"})
    restore_choice: bool = field(default=False, metadata={
        "help": "on: for a turn whose KV is on SSD, choose per turn to wait for its load, "
                "recompute the history or load a prefix and recompute the rest, by the earliest "
                "expected first token (scheduler/restore_chooser.py); off: always wait"})
    restore_suffix_loads: bool = field(default=True, metadata={
        "help": "restore choice: also consider recomputing the history's beginning while the "
                "store reads the rest (the reversed split; off: prefixes only)"})
    restore_stall_weight: float = field(default=0.3, metadata={
        "help": "restore choice: weight of the decode stall a recompute imposes on the running "
                "turns (0: ignore it)"})
    max_queue: int = field(default=1024, metadata={
        "help": "queued turns beyond which new ones are refused (RESOURCE_EXHAUSTED)"})
    rpc_threads: int = field(default=0, metadata={
        "help": "gRPC threads (a turn holds one while queued or running); 0: max_queue + 512 "
                "running + 32 for Stats, health and heartbeats. Calls beyond it are refused "
                "(RESOURCE_EXHAUSTED), never queued unseen"})
    max_tokens_limit: int = field(default=0, metadata={
        "help": "largest max_tokens (and min_tokens) accepted, and the answer length of a turn "
                "that sets none; 0: no limit but the model's context, as the gateway "
                "advertises it (the worker clamps to what is left)"})
    scheduler_id: str = field(default="scheduler", metadata={"help": "id on the Awareness stream"})
    conversation_keys: int = field(default=1_000_000, metadata={
        "help": "turns sent without a session id are recognised by their history: the most "
                "message-prefix keys the conversation index holds (~200 bytes each; least "
                "recently used conversations are forgotten first; 0: recognition off)"})
    conversation_ttl_s: float = field(default=3600.0, metadata={
        "help": "a recognised conversation idle this long is forgotten (its next turn starts "
                "a new session)"})
    responses_store_bytes: int = field(default=256 << 20, metadata={
        "help": "Responses API: the stored responses' bytes kept in memory, for every gateway's "
                "previous_response_id and GET (past it, the tenant holding the most drops its "
                "least recently used first; 0: none kept)"})
    responses_ttl_s: float = field(default=86400.0, metadata={
        "help": "Responses API: a stored response unused this long is dropped"})
    state_dir: str = field(default="", metadata={
        "help": "directory for the journals of the conversation index and of the stored "
                "responses, so that a restarted scheduler still recognises conversations sent "
                "without a session id and continues `previous_response_id` (empty: memory only)"})
    metrics_listen: str = field(default="", metadata={
        "help": "host:port for Prometheus /metrics (empty: off)"})

    def __post_init__(self):
        if self.policy not in QUEUE_POLICIES:
            raise ValueError(f"--policy must be one of {', '.join(QUEUE_POLICIES)}, not "
                             f"{self.policy!r}")
        check_bounds(self, at_least={"prefetch_window": 1, "max_loads": 1, "max_queue": 1,
                                     "max_tokens_limit": 0, "rpc_threads": 0,
                                     "conversation_keys": 0, "restore_stall_weight": 0,
                                     "responses_store_bytes": 0},
                     above={"heartbeat_s": 0, "conversation_ttl_s": 0, "responses_ttl_s": 0})
