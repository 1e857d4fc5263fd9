"""A reverse proxy on loopback for tests, doing what deploy/nginx.conf does: requests spread
over the upstreams in turn, each sent with `X-Forwarded-For` set to the client's own address
(replacing any the client wrote) from the proxy's own source address, which is what the web
processes' `forwarded_allow_ips` names. Responses are passed on as they come (a stream of
events too). Real sockets, no mocks.

    with ReverseProxy(["127.0.0.1:8001", "127.0.0.1:8002"], source="127.0.0.41") as proxy:
        httpx.get(f"http://127.0.0.1:{proxy.port}/healthz")
        proxy.hits  # {"127.0.0.1:8001": 1}
"""

from __future__ import annotations

import http.client
import http.server
import itertools
import threading
from collections import Counter

__all__ = ["ReverseProxy"]

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade",
              "te", "trailer", "x-forwarded-for", "x-forwarded-proto"}


class ReverseProxy:
    def __init__(self, upstreams: list[str], source: str) -> None:
        turn = itertools.cycle(upstreams)
        lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # one request a connection; the body ends at close

            def log_message(self, *args) -> None:
                pass

            def _relay(self) -> None:
                with lock:
                    upstream = next(turn)
                    proxy.hits[upstream] += 1
                host, port = upstream.rsplit(":", 1)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                headers["X-Forwarded-For"] = self.client_address[0]  # as $remote_addr
                headers["X-Forwarded-Proto"] = "http"
                conn = http.client.HTTPConnection(host, int(port), timeout=300,
                                                  source_address=(source, 0))
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    answer = conn.getresponse()
                    self.send_response_only(answer.status, answer.reason)
                    for k, v in answer.getheaders():
                        if k.lower() not in HOP_BY_HOP and k.lower() != "content-length":
                            self.send_header(k, v)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while chunk := answer.read1(65536):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    pass  # the client or the upstream went away: the connection ends
                finally:
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _relay

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def __enter__(self) -> ReverseProxy:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
