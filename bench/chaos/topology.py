"""The chaos runner's deployment: services.launch.launcher.LocalDeployment, set up for fault
injection. Small DRAM (a SmolLM2 conversation past ~91 tokens lives on SSD), a store arena
directory of its own, one CPU per worker, half-second heartbeats. By default nobody restarts
anything (the faults kill and restart services, on the same port and data directory, so
clients that retry find them again where they were) and there is no gateway; `supervised=True`
is `bidaw up`'s deployment (one worker, the gateway), whose supervisor restarts what dies."""
from __future__ import annotations

import pathlib
from dataclasses import dataclass, field

from compute_worker.config import WorkerConfig
from kv_store.config import StoreConfig
from scheduler.config import SchedulerConfig
from services.launch.launcher import LocalDeployment
from services.launch.supervisor import RestartPolicy
from services.runtime.config import config_flags


@dataclass
class Topology(LocalDeployment):
    dram_bytes: str | int = "4MiB"
    store_flags: list[str] = field(default_factory=list)  # more flags of the store
    env: dict[str, str] = field(default_factory=dict)  # extra environment of every service
    supervised: bool = False

    def __post_init__(self):
        if self.supervised and (self.workers != 1 or self.scheduler_store):
            raise ValueError("a supervised topology has one worker and no proxy")
        self.gateway = self.supervise = self.supervised
        self.metrics = False
        self.restart_policy = RestartPolicy(first_delay_s=0.2, healthy_s=10.0)
        self.extra_env = {**self.extra_env, **self.env}
        shm = pathlib.Path(self.data_dir) / "shm"
        shm.mkdir(parents=True, exist_ok=True)
        self.extra_args = {
            "store": [*config_flags(StoreConfig, shm_dir=str(shm)), *self.store_flags],
            # fp32: answers are checked token for token against the fp32 recompute reference
            "worker": config_flags(WorkerConfig, threads=1, ray_num_cpus=1, dtype="float32"),
            "scheduler": config_flags(SchedulerConfig, heartbeat_s=0.5)}
        super().__post_init__()

    def worker_names(self) -> list[str]:
        # the faults name them: worker0, worker1, ...; the supervised one is bidaw up's "worker"
        return ["worker"] if self.supervised else [f"worker{i}" for i in range(self.workers)]

    @property
    def deployment(self) -> "Topology":
        """The supervised deployment (its procs and supervisor), for the service-crash fault."""
        return self

    def start(self, timeout: float = 240.0) -> "Topology":
        return super().start(timeout)
