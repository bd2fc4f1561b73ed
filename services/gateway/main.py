"""Run the gateway: `bidaw serve gateway`."""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal

from aiohttp import web

from services.gateway.app import Gateway
from services.gateway.config import GatewayConfig
from services.gateway.metrics_site import start_metrics_site
from services.gateway.safe_protocol import RedactingAppRunner
from services.runtime.config_checks import ListenError
from services.runtime.process import stop_requested

log = logging.getLogger("bidaw.gateway")


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(config: GatewayConfig, gateway: Gateway) -> None:
    """Without API keys anyone who can connect is served: only loopback, unless asked for."""
    host, _ = split_listen(config.listen)
    if gateway.tenants.open and not is_loopback(host) and not config.allow_open:
        raise SystemExit(f"bidaw serve gateway: no API keys are configured, so it serves "
                         f"loopback only; {host} is not loopback. Set BIDAW_GATEWAY_API_KEYS "
                         "or --api-keys-file, or --allow-open true.")


async def start(config: GatewayConfig, gateway: Gateway | None = None) -> tuple[web.AppRunner,
                                                                                 int]:
    """Start serving; returns the runner (await runner.cleanup() to stop) and the bound port."""
    gateway = gateway or Gateway(config)
    check_exposure(config, gateway)
    if config.metrics_listen:  # before setup(): the app's cleanup signal freezes there
        try:
            metrics_runner, gateway.metrics_port = await start_metrics_site(
                *split_listen(config.metrics_listen))
        except OSError as exc:
            raise _listen_error("--metrics-listen", config.metrics_listen, exc) from None
        gateway.app.on_cleanup.append(lambda _: metrics_runner.cleanup())
    # handler_cancellation: a client that hangs up cancels its handler, whose `finally` cancels
    # the SubmitTurn call, so the worker stops generating for nobody.
    runner = RedactingAppRunner(gateway.app, access_log=None, handle_signals=False,
                                handler_cancellation=True)
    await runner.setup()
    host, port = split_listen(config.listen)
    site = web.TCPSite(runner, host, port, backlog=1024)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise _listen_error("--listen", config.listen, exc) from None
    bound = site._server.sockets[0].getsockname()[1]
    log.info("gateway on http://%s:%d/v1 -> scheduler %s; %s", host, bound, config.scheduler,
             "open (no API keys)" if gateway.tenants.open else "API keys required")
    return runner, bound


def _listen_error(flag: str, listen: str, exc: OSError) -> ListenError:
    return ListenError(flag, listen, os.strerror(exc.errno) if exc.errno else str(exc))


async def _run(config: GatewayConfig) -> None:
    try:
        gateway = Gateway(config)
    except ValueError as exc:  # its API keys: one line naming the flag, never a key
        raise SystemExit(f"bidaw serve gateway: {exc}") from None
    runner, _ = await start(config, gateway)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if stop_requested():  # a signal came while it started (services/runtime/process.py)
        stop.set()
    await stop.wait()
    gateway.draining = True  # new turns get 503 while running ones finish
    await runner.shutdown()
    await runner.cleanup()


def serve(config: GatewayConfig) -> None:
    asyncio.run(_run(config))
