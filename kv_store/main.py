"""Run the KV store service: `bidaw serve store`."""
from __future__ import annotations

import logging

from services.gen import kv_store_pb2_grpc
from services.grpc_util import Server
from services.runtime import wait_for_signal

from .config import StoreConfig
from .service import KVStoreService
from .store import KVStore

log = logging.getLogger("bidaw.kv_store")


def start(config: StoreConfig) -> tuple[Server, KVStore]:
    store = KVStore(config)
    server = Server(config.listen, [(kv_store_pb2_grpc.add_KVStoreServicer_to_server,
                                     KVStoreService(store))], name="bidaw.v1.KVStore")
    log.info("KV store on port %d: DRAM %d B, SSD %d B at %s, eviction %s", server.port,
             config.dram_bytes, config.ssd_bytes, config.data_dir, config.eviction)
    return server, store


def serve(config: StoreConfig) -> None:
    server, store = start(config)
    wait_for_signal()
    server.stop()
    store.close()
