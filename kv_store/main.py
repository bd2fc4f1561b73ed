"""Run the KV store service: `bidaw serve store`."""
from __future__ import annotations

import logging

from services.runtime.grpc_util import Server
from services.runtime.membership_auth import server_token
from services.runtime.gen import scheduler_pb2
from services.runtime.registrar import serve_registered

from kv_store.chunk_wire import add_store_servicer
from kv_store.config import StoreConfig
from kv_store.errors import StoreError
from kv_store.service import KVStoreService
from kv_store.store import KVStore

log = logging.getLogger("bidaw.kv_store")


def start(config: StoreConfig) -> tuple[Server, KVStore]:
    store = KVStore(config)
    try:
        server = Server(config.listen, [(add_store_servicer, KVStoreService(store))],
                        name="bidaw.v1.KVStore", token=server_token(config))
    except BaseException:  # its port in use: the DRAM arena in /dev/shm goes with it
        store.close()
        raise
    log.info("KV store on port %d: DRAM %d B, SSD %d B at %s, eviction %s%s", server.port,
             config.dram_bytes, config.ssd_bytes, config.data_dir, config.eviction,
             ", promoting ahead of predicted returns" if store.prefetcher else "")
    return server, store


def serve(config: StoreConfig) -> None:
    try:
        server, store = start(config)
    except StoreError as exc:  # the index (Redis) is unreachable: one line, and a restart
        raise SystemExit(f"bidaw serve store: {exc.message}") from None
    serve_registered(config, scheduler_pb2.MEMBER_KIND_STORE, server)
    store.close()
