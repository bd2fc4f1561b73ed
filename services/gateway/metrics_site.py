"""The gateway's own metrics: on its API port (behind a key when keys are configured) and,
with --metrics-listen, on a second address without one, served by the same event loop (so a
liveness probe there still proves the loop answers)."""
from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.runtime.metrics import registry_of


def metrics_response() -> web.Response:
    return web.Response(body=generate_latest(registry_of("gateway")),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def start_metrics_site(host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve GET /metrics on host:port; returns the runner (cleanup() stops it) and the port."""
    app = web.Application()
    app.router.add_get("/metrics", _respond)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]


async def _respond(request: web.Request) -> web.Response:
    return metrics_response()
