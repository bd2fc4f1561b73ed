"""The image's HEALTHCHECK: ask the service this container runs whether it is serving.

One image runs every service, so the check reads the command line of PID 1 (`tini -- bidaw serve
store --listen ...`), resolves the service's configuration exactly as the service itself does
(flags, BIDAW_* environment, --config YAML, defaults) and asks on loopback: the standard gRPC
health service for the KV store, scheduler and compute worker, GET /health for the gateway and
for `bidaw up` (whose gateway is its front door).
Exit 0 when serving, 1 when not; a container running anything else (`bidaw chat`) is healthy.

Kubernetes ignores HEALTHCHECK and uses the probes in k8s/; this serves Docker and Compose.
"""
from __future__ import annotations

import os
import sys

# `bidaw serve NAME` -> the gRPC health service name that NAME's server registers.
GRPC_SERVICE = {"store": "bidaw.v1.KVStore", "scheduler": "bidaw.v1.Scheduler",
                "worker": "bidaw.v1.ComputeWorker"}
HTTP_SERVICES = {"gateway"}


def command_line(pid: int = 1) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return [arg.decode() for arg in fh.read().split(b"\0") if arg]


def bidaw_args(cmdline: list[str]) -> list[str] | None:
    """The arguments given to `bidaw` (or `python -m services.cli.main`) in a command line."""
    for i, arg in enumerate(cmdline):
        if os.path.basename(arg) == "bidaw":
            return cmdline[i + 1:]
        if arg == "services.cli.main" and i > 0 and cmdline[i - 1] == "-m":
            return cmdline[i + 1:]
    return None


def _port(listen: str) -> str:
    return listen.rsplit(":", 1)[-1]


def probe_target(args: list[str]) -> tuple[str, str, str] | None:
    """("grpc", "127.0.0.1:PORT", health service name) or ("http", "127.0.0.1:PORT", "/health"),
    or None when the command serves nothing."""
    from services.cli.main import build_parser

    ns = build_parser().parse_args(args)
    if ns.command == "up":  # the embedded deployment: healthy when its front door answers
        return "http", f"127.0.0.1:{ns.port}", "/health"
    if ns.command != "serve":
        return None
    from services.cli.serve import service_config

    config = service_config(ns)
    target = f"127.0.0.1:{_port(config.listen)}"
    if ns.service in HTTP_SERVICES:
        return "http", target, "/health"
    return "grpc", target, GRPC_SERVICE.get(ns.service, "")


def tls_files(args: list[str]):
    """The TLS files of a `bidaw serve` gRPC service (its --tls-* / BIDAW_*_TLS_*), or None:
    with TLS on, the check must dial with them (and present the cert where mTLS is on)."""
    from services.cli.main import build_parser

    ns = build_parser().parse_args(args)
    if ns.command != "serve" or ns.service in HTTP_SERVICES:
        return None
    from services.cli.serve import service_config
    from services.runtime.tls import TLSFiles

    return TLSFiles.from_config(service_config(ns))


def check(kind: str, target: str, what: str, timeout: float = 3.0, tls=None) -> bool:
    if kind == "http":
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://{target}{what}", timeout=timeout) as reply:
                return reply.status == 200
        except OSError:
            return False
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from services.runtime.grpc_util import channel as make_channel

    with make_channel(target, tls) as channel:  # `tls` None: plaintext
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=what), timeout=timeout)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else bidaw_args(command_line())
    if args is None:
        return 0
    target = probe_target(args)
    if target is None:
        return 0
    healthy = check(*target, tls=tls_files(args))
    print(f"{target[1]} {'serving' if healthy else 'NOT serving'}")
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or None))
