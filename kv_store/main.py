"""Run the KV store service: `bidaw serve store`."""
from __future__ import annotations

import logging

from services.grpc_util import Server
from services.membership_auth import server_token
from services.runtime import wait_for_signal

from .chunk_wire import add_store_servicer
from .config import StoreConfig
from .errors import StoreError
from .service import KVStoreService
from .store import KVStore

log = logging.getLogger("bidaw.kv_store")


def start(config: StoreConfig) -> tuple[Server, KVStore]:
    store = KVStore(config)
    server = Server(config.listen, [(add_store_servicer, KVStoreService(store))],
                    name="bidaw.v1.KVStore", token=server_token(config))
    log.info("KV store on port %d: DRAM %d B, SSD %d B at %s, eviction %s", server.port,
             config.dram_bytes, config.ssd_bytes, config.data_dir, config.eviction)
    return server, store


def serve(config: StoreConfig) -> None:
    from services.gen import scheduler_pb2
    from services.membership_auth import config_token
    from services.registrar import Registrar, advertised

    try:
        server, store = start(config)
    except StoreError as exc:  # the index (Redis) is unreachable: one line, and a restart
        raise SystemExit(f"bidaw serve store: {exc.message}") from None
    registrar = Registrar(config.scheduler, scheduler_pb2.MEMBER_KIND_STORE,
                          advertised(config.advertise, config.listen, server.port),
                          config_token(config)).start()
    wait_for_signal()
    registrar.stop()  # first: sessions stop being routed here
    server.stop()
    store.close()
