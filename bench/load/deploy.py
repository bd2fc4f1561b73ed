"""The deployment `bidaw load` starts when no --target is given: the embedded LocalDeployment,
sized to shed load rather than queue it without end on a small machine."""
from __future__ import annotations

from dataclasses import dataclass

from scheduler.config import SchedulerConfig
from services.gateway.config import GatewayConfig
from services.launch.launcher import LocalDeployment
from services.runtime.config import config_flags


@dataclass
class LoadLimits:
    dram_bytes: str = "64MiB"   # small: most conversations' KV goes to the SSD tier
    ssd_bytes: str = "2GiB"     # small too, so SSD eviction runs and the disk stays bounded
    # Turns the gateway lets through at once. Kept below the scheduler's 64 gRPC threads (each
    # SubmitTurn holds one), so Stats and health checks still find a thread under load.
    max_in_flight: int = 48
    # Turns past max_in_flight wait in the gateway's fair FIFO (no retry storm); the load's
    # sessions all fit, so a turn is refused only if it would wait past the gateway's limit.
    max_waiting: int = 1024
    max_queue: int = 32         # the scheduler's queue bound (running turns are not queued)
    request_timeout_s: float = 300.0


def start(data_dir: str, limits: LoadLimits, max_tokens: int) -> LocalDeployment:
    dep = LocalDeployment(
        data_dir=data_dir, dram_bytes=limits.dram_bytes, ssd_bytes=limits.ssd_bytes,
        default_max_tokens=max_tokens,
        extra_args={"gateway": config_flags(GatewayConfig, max_in_flight=limits.max_in_flight,
                                            max_waiting=limits.max_waiting,
                                            request_timeout_s=limits.request_timeout_s),
                    "scheduler": config_flags(SchedulerConfig, max_queue=limits.max_queue)})
    return dep.start()


def service_pids(dep: LocalDeployment) -> dict[str, int]:
    return {name: proc.pid for name, proc in dep.procs}
