"""Run the scheduler service: `bidaw serve scheduler`."""
from __future__ import annotations

import logging

from services.runtime.gen import scheduler_pb2_grpc
from services.runtime.grpc_util import Server
from services.runtime.membership_auth import server_token
from services.runtime.process import wait_for_signal

from scheduler.config import SchedulerConfig
from scheduler.service import SchedulerService
from scheduler.workers import WorkerPool

log = logging.getLogger("bidaw.scheduler")
# On SIGTERM the scheduler refuses new turns (the gateway answers 503 and retries elsewhere) and
# lets the ones it relays finish this long, as a worker does (within Kubernetes' 60-s grace).
DRAIN_S = 30.0


def start(config: SchedulerConfig) -> tuple[Server, SchedulerService]:
    service = SchedulerService(config, WorkerPool(config.workers)).start()
    threads = config.rpc_threads or config.max_queue + 512 + 32
    server = Server(config.listen, [(scheduler_pb2_grpc.add_SchedulerServicer_to_server,
                                     service)], name="bidaw.v1.Scheduler",
                    max_workers=threads, max_concurrent_rpcs=threads, token=server_token(config))
    log.info("scheduler on port %d, policy %s, workers %s", server.port, config.policy,
             ",".join(config.workers))
    return server, service


def serve(config: SchedulerConfig) -> None:
    try:
        server, service = start(config)
    except ValueError as exc:  # a flag that cannot work (--state-dir): one line
        raise SystemExit(f"bidaw serve scheduler: {exc}") from None
    wait_for_signal()
    server.stop(DRAIN_S)
    service.stop()
