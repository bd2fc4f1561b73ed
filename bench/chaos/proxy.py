"""A TCP proxy on loopback that can be cut: every connection through it is closed and new ones
are refused until it is healed — a network partition between whoever dials it and its target."""
from __future__ import annotations

import socket
import threading

from services.launch.launcher import free_port


class CuttableProxy:
    def __init__(self, target: str):
        host, port = target.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cut_now = threading.Event()
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self.cut_now.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not self.cut_now.is_set():
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self.cut_now.set()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def heal(self) -> None:
        self.cut_now.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()
