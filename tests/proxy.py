"""A TCP relay on loopback that a test can cut and restore, to see what a browser does when its
network drops (an EventSource reconnecting, say). Real sockets, no mocks.

    with Relay(target_port) as relay:
        page.goto(f"http://127.0.0.1:{relay.port}/...")
        relay.cut()       # every open connection is closed; new ones are refused
        relay.restore()   # connections are accepted again
"""

from __future__ import annotations

import socket
import threading

__all__ = ["Relay"]


class Relay:
    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._up = True
        self._stopped = False
        self.connections = 0  # accepted while up: a test can see a browser came back

    def __enter__(self) -> Relay:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped = True
        self._listener.close()
        self._close_all()

    def cut(self) -> None:
        self._up = False
        self._close_all()

    def restore(self) -> None:
        self._up = True

    def _close_all(self) -> None:
        with self._lock:
            for s in self._open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self._open.clear()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up:
                client.close()  # the network is down: the connection fails at once
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self.connections += 1
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
