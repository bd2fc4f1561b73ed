"""The /metrics HTTP server of the internal services (the KV store, workers, scheduler).

prometheus_client's own server gives every connection a thread for as long as it stays open, with
no timeout: anyone who reached the port (other local users: it needs no token) could make a
store or worker start a thread per idle connection, without bound (650 seen, growing). This one
closes a silent connection and serves a bounded number at once.
"""
from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

METRICS_IDLE_S = 10.0     # a connection silent this long is closed
METRICS_CONNECTIONS = 256  # connections served at once; one more is closed unanswered


class _Handler(WSGIRequestHandler):
    timeout = METRICS_IDLE_S  # socket timeout of each read: a silent client is let go

    def log_message(self, format, *args):  # no access log
        pass


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args, **kw):
        self._slots = threading.BoundedSemaphore(METRICS_CONNECTIONS)
        super().__init__(*args, **kw)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def serve_metrics(host: str, port: int, registry) -> WSGIServer:
    """Serve `registry` at http://host:port/metrics from a daemon thread; the server."""
    family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                   flags=socket.AI_PASSIVE)[0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    server = make_server(sockaddr[0], port, make_wsgi_app(registry), server_class,
                         handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
