"""Run a compute worker: `bidaw serve worker`. Joins (or starts) Ray and hosts the engine actor."""
from __future__ import annotations

import logging
import os
import pathlib
import re
import secrets
import shutil
import tempfile

from services.runtime.gen import compute_worker_pb2_grpc, scheduler_pb2
from services.runtime.grpc_util import Server
from services.runtime.membership_auth import server_token
from services.runtime.process import signal_handlers_kept, stop_requested
from services.runtime.registrar import serve_registered

from compute_worker.config import WorkerConfig
from compute_worker.engine_config import EngineConfig
from compute_worker.loaders.model_source import model_source

log = logging.getLogger("bidaw.compute_worker")
# The local Ray's temporary directory, named for the worker that owns it: removed on stop, and
# by the next worker to start if its owner was killed. Short: Ray's socket paths must stay short.
# Private (0700) from its creation on; Ray gets a folder inside it (RAY_TEMP_INNER), which Ray
# opens to everyone while it starts: a stranger who stepped in during those seconds would keep
# its logs and sockets after a chmod, but cannot pass the parent.
RAY_TEMP_PREFIX = "ray-bidaw-"
RAY_TEMP_INNER = "r"
_RAY_TEMP_RE = re.compile(rf"^{RAY_TEMP_PREFIX}(\d+)-")
_ray_temp_dir: str | None = None
# What the engine actor reads from its environment: tracing, gRPC keepalives, logs, the native
# kernels' build folder. Ray starts the actor in its raylet's environment, which on a cluster
# the worker joins is not the worker's: these are handed over explicitly.
ACTOR_ENV_PREFIXES = ("OTEL_", "BIDAW_GRPC_", "BIDAW_LOG_", "BIDAW_NATIVE_")


def actor_env(environ=os.environ) -> dict[str, str]:
    """The variables of `environ` the engine actor must see as the worker does."""
    return {k: v for k, v in environ.items() if k.startswith(ACTOR_ENV_PREFIXES)}


def ray_env(config: WorkerConfig) -> None:
    """A caller Ray lets in runs any code. A worker that starts its own cluster keeps it on
    loopback (else its GCS, raylet, workers and the autoscaler's metrics port, which asks no
    token, listen on every interface) and turns on Ray's token auth with a token made here,
    kept in this process's environment (which Ray's processes inherit), never on disk.
    Joining a cluster, its own settings rule. Call before Ray is imported: it reads them then."""
    if config.ray_address:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else Ray writes a token to $HOME
        return
    # Ray's switch for platforms without clusters: the node's address is then 127.0.0.1
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    if os.environ.get("RAY_AUTH_MODE") != "token" or not os.environ.get("RAY_AUTH_TOKEN"):
        os.environ["RAY_AUTH_MODE"] = "token"
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def init_ray(config: WorkerConfig) -> None:
    ray_env(config)
    import ray

    if ray.is_initialized():
        return
    if config.ray_address:
        with signal_handlers_kept():
            ray.init(address=config.ray_address, log_to_driver=True)
        return
    global _ray_temp_dir
    sweep_ray_temp_dirs()
    _ray_temp_dir = tempfile.mkdtemp(prefix=f"{RAY_TEMP_PREFIX}{os.getpid()}-", dir="/tmp")
    with signal_handlers_kept():
        ray.init(num_cpus=config.ray_num_cpus, object_store_memory=config.ray_object_store_bytes,
                 include_dashboard=False, log_to_driver=True,
                 _temp_dir=os.path.join(_ray_temp_dir, RAY_TEMP_INNER))


def shutdown_ray() -> None:
    """Stop the local Ray and remove its temporary directory (sockets, logs, spill files)."""
    import ray

    global _ray_temp_dir
    ray.shutdown()
    if _ray_temp_dir:
        shutil.rmtree(_ray_temp_dir, ignore_errors=True)
        _ray_temp_dir = None


def sweep_ray_temp_dirs(base: str = "/tmp") -> None:
    """Remove the Ray temporary directories of workers that are gone (killed, so not cleaned)."""
    for entry in pathlib.Path(base).glob(f"{RAY_TEMP_PREFIX}*"):
        match = _RAY_TEMP_RE.match(entry.name)
        if match and not pathlib.Path(f"/proc/{match.group(1)}").exists():
            shutil.rmtree(entry, ignore_errors=True)


def start(config: WorkerConfig):
    ray_env(config)  # before Ray is imported (by the actor's module)
    from compute_worker.actor import EngineActor
    from compute_worker.service import ComputeWorkerService

    init_ray(config)
    # Threaded actor: each running turn's generator waits in its own thread while the engine's
    # step loop batches them all.
    actor = EngineActor.options(num_cpus=1, max_concurrency=config.max_batch + 4,
                                runtime_env={"env_vars": actor_env()}).remote(
        EngineConfig.from_worker(config))
    wait_for_engine(actor)
    service = ComputeWorkerService(actor, config.worker_id)
    server = Server(config.listen, [(compute_worker_pb2_grpc.add_ComputeWorkerServicer_to_server,
                                     service)], name="bidaw.v1.ComputeWorker",
                    token=server_token(config))
    service.worker_id = service.worker_id or f"{config.listen.rsplit(':', 1)[0]}:{server.port}"
    worker_id = service.worker_id
    info = service.info
    log.info("compute worker %s on port %d: model %s in %s (%s), KV format %s, prompts up to "
             "%d bytes (the gateway's --max-prompt-bytes)", worker_id, server.port,
             info["model"], info["dtype"], info["dtype_reason"], info["kv_format"],
             info["max_prompt_bytes"])
    return server, service


def wait_for_engine(actor) -> None:
    """Until the engine actor has loaded its model. Its death ends the start in one line (the
    actor's own traceback is in its log), and so does a stop asked for meanwhile: Ray waits for
    room for the actor without end (a cluster with no free CPU or GPU)."""
    import ray

    ready = actor.info.remote()
    while not ray.wait([ready], timeout=1.0)[0]:
        if stop_requested():  # a clean stop: status 0
            log.info("stopped before the engine started")
            raise SystemExit(0)
    try:
        ray.get(ready)
    except ray.exceptions.RayActorError as exc:  # its last line is the actor's exception
        cause = (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
        raise SystemExit(f"bidaw serve worker: the engine did not start: {cause}") from None


def serve(config: WorkerConfig) -> None:
    if not config.ray_address:  # the actor runs here: a wrong --model is one line, not a traceback
        try:
            model_source(config.model)
        except ValueError as exc:
            raise SystemExit(f"bidaw serve worker: --model {exc}") from None
    try:  # Ray stopped and its directory removed also when the start fails or is cut short
        server, service = start(config)  # (SIGTERM in ray.init meets Ray's handler: sys.exit)
        serve_registered(config, scheduler_pb2.MEMBER_KIND_WORKER, server,
                         grace=30.0,  # running turns finish
                         model=service.info["model"], kv_dtype=service.info["kv_dtype"])
    finally:
        shutdown_ray()
