"""A gateway on its own event-loop thread inside the test process."""
from __future__ import annotations

import asyncio
import threading

from services.gateway.app import Gateway
from services.gateway.config import GatewayConfig
from services.gateway.main import start


class BackgroundGateway:
    def __init__(self, config: GatewayConfig):
        self.config = config
        self.gateway: Gateway | None = None
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="gateway",
                                        daemon=True)
        self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "BackgroundGateway":
        self._thread.start()

        async def boot():
            self.gateway = Gateway(self.config)  # its gRPC channel binds to this loop
            return await start(self.config, self.gateway)

        self._runner, self.port = asyncio.run_coroutine_threadsafe(boot(), self._loop).result(30)
        return self

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> "BackgroundGateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
