"""Run the KV store service: `bidaw serve store`; told to stop, it drains (drain.py)."""
from __future__ import annotations

import logging
import time

from services.runtime.grpc_util import Server
from services.runtime.membership_auth import config_token, server_token
from services.runtime.gen import scheduler_pb2
from services.runtime.process import wait_for_signal
from services.runtime.registrar import Registrar, advertised

from kv_store.chunk_wire import add_store_servicer
from kv_store.config import StoreConfig
from kv_store.drain import DrainGate
from kv_store.errors import StoreError
from kv_store.service import KVStoreService
from kv_store.store import KVStore

log = logging.getLogger("bidaw.kv_store")


def start(config: StoreConfig, gate: DrainGate | None = None) -> tuple[Server, KVStore]:
    """The store and its server; `gate`: the calls it counts and, once draining, refuses."""
    store = KVStore(config)
    try:
        server = Server(config.listen, [(add_store_servicer, KVStoreService(store))],
                        name="bidaw.v1.KVStore", token=server_token(config),
                        interceptors=(gate,) if gate is not None else ())
    except BaseException:  # its port in use: the DRAM arena in /dev/shm goes with it
        store.close()
        raise
    log.info("KV store on port %d: DRAM %d B, SSD %d B at %s, eviction %s%s", server.port,
             config.dram_bytes, store.ssd_bytes, config.data_dir, config.eviction,
             ", promoting ahead of predicted returns" if store.prefetcher else "")
    return server, store


def serve(config: StoreConfig) -> None:
    gate = DrainGate()
    try:
        server, store = start(config, gate)
    except StoreError as exc:  # the index unreachable, the directory another store's: one line
        raise SystemExit(f"bidaw serve store: {exc.message}") from None
    registrar = Registrar(config.scheduler, scheduler_pb2.MEMBER_KIND_STORE,
                          advertised(config.advertise, config.listen, server.port),
                          config_token(config)).start()
    wait_for_signal()
    stop(config, server, store, registrar, gate)


def stop(config: StoreConfig, server: Server, store: KVStore, registrar: Registrar,
         gate: DrainGate) -> None:
    """Health NOT_SERVING and new calls refused at once, deregistered (no new work is routed
    here), then the calls in flight finish and the SSD copies land (at most --drain-seconds),
    then the server stops and the store closes."""
    began = time.monotonic()
    server.set_serving(False)
    gate.begin()
    registrar.stop()
    left = gate.wait(max(config.drain_seconds - (time.monotonic() - began), 0.0),
                     store.unfinished_writes)
    if left:
        log.warning("stopping with %d call(s) still running after --drain-seconds %g: cut",
                    left, config.drain_seconds)
    else:
        log.info("drained in %.1f s", time.monotonic() - began)
    server.stop(0)
    store.close()  # SSD copies still queued land before it returns
