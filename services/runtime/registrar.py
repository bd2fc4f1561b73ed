"""A member's side of run-time membership: register with the scheduler(s), heartbeat, and
deregister on a clean stop. A scheduler that restarts relearns its members within a heartbeat.
A worker says its model; a scheduler whose workers serve another refuses it (FAILED_PRECONDITION)
and it keeps trying at every beat: it joins once the other model's workers are gone (a rolling
upgrade needs no restart of the new workers; exiting instead would make a supervisor restart it
until it gave up). The refusal is a WARNING, repeated every 5 minutes while it lasts."""
from __future__ import annotations

import logging
import threading

import grpc

from services.runtime.gen import scheduler_pb2, scheduler_pb2_grpc
from services.runtime.grpc_util import channel
from services.runtime.log_repeats import Reminder, since
from services.runtime.membership_auth import call_metadata

log = logging.getLogger("bidaw.membership")


class Registrar:
    def __init__(self, schedulers: str, kind: int, address: str, token: str = "",
                 model: str = "", kv_dtype: int = 0):
        """`token`: the cluster token the scheduler requires (services.runtime.membership_auth);
        `model`, `kv_dtype`: a worker's (scheduler.proto Registration)."""
        self.kind = kind
        self.address = address
        self.model, self.kv_dtype = model, kv_dtype
        self._refused: dict[int, Reminder] = {}  # scheduler -> its refusal's reminder
        self._metadata = call_metadata(token)
        self._warned: set[grpc.StatusCode] = set()
        self._stubs = [scheduler_pb2_grpc.SchedulerStub(channel(t.strip()))
                       for t in schedulers.split(",") if t.strip()]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)

    def start(self) -> "Registrar":
        if self._stubs:
            self._thread.start()
        return self

    def _registration(self) -> scheduler_pb2.Registration:
        return scheduler_pb2.Registration(kind=self.kind, address=self.address,
                                          model=self.model, kv_dtype=self.kv_dtype)

    def _run(self) -> None:
        interval = 1.0
        while not self._stop.is_set():
            for i, stub in enumerate(self._stubs):
                try:
                    interval = stub.Register(self._registration(), timeout=2.0,
                                             metadata=self._metadata).heartbeat_s
                    if self._refused.pop(i, None) is not None:
                        log.info("the scheduler accepted this member after refusing it")
                except grpc.RpcError as exc:
                    self._failed(i, exc, interval)
            self._stop.wait(max(0.2, interval / 2))  # two beats per period: one may be lost

    def _failed(self, i: int, exc: grpc.RpcError, interval: float) -> None:
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:  # another model's workers there
            held = self._refused.setdefault(i, Reminder()).due()
            if held is not None:
                log.warning("the scheduler refused this member: %s: %s (trying again every "
                            "%.1f s)%s", exc.code().name, exc.details(), max(0.2, interval / 2),
                            since(held))
        elif exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT):
            # A refusal that will not heal by retrying (wrong token, bad --advertise): say so
            # once; an unreachable scheduler is routine while it restarts.
            if exc.code() not in self._warned:
                self._warned.add(exc.code())
                log.warning("the scheduler refused this member: %s: %s", exc.code().name,
                            exc.details())
        else:
            log.debug("register with scheduler failed: %s", exc.code())

    def stop(self) -> None:
        self._stop.set()
        for stub in self._stubs:
            try:
                stub.Deregister(self._registration(), timeout=2.0, metadata=self._metadata)
            except grpc.RpcError:
                pass


def advertised(config_advertise: str, listen: str, port: int) -> str:
    """host:port others should dial: --advertise, else the listen host (loopback if wildcard)."""
    if config_advertise:
        return config_advertise
    host = listen.rsplit(":", 1)[0]
    return f"{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"


def serve_registered(config, kind: int, server, grace: float = 2.0, model: str = "",
                     kv_dtype: int = 0) -> None:
    """Serve as a member of `kind` until SIGINT/SIGTERM: register `server` with the scheduler(s)
    of `config` (a worker: with its `model` and `kv_dtype`), then on the signal deregister first
    (no new work is routed here) and only then stop the server, giving running calls `grace`
    seconds."""
    from services.runtime.membership_auth import config_token
    from services.runtime.process import wait_for_signal

    registrar = Registrar(config.scheduler, kind,
                          advertised(config.advertise, config.listen, server.port),
                          config_token(config), model, kv_dtype).start()
    wait_for_signal()
    registrar.stop()
    server.stop(grace)
