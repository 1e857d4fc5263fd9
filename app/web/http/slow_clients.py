"""Connections bounded before a request reaches the app.

uvicorn (0.54) has no timer on a request being sent: its keep-alive timer runs only between
requests and is cancelled by every byte received, so a client that drips a header one byte at
a time holds a connection, and a file descriptor, for as long as it likes; and every connection
is accepted. `BoundedH11Protocol` is uvicorn's own h11 protocol with two additions:

- a deadline for each request to arrive whole (its head and its body), armed when the
  connection opens and again when a response ends and the connection waits for the next one
  (or has the start of it already: a request sent right behind another); past it the
  connection is closed. A request that has arrived is not timed: a page following a class
  keeps its event stream for as long as it likes.
- a deadline for a client that stops reading: while the answer waits to be sent (the socket's
  buffer full), the connection is closed after `send_timeout` without progress, so a client
  that sends requests and never reads holds neither a connection nor the answer's memory.
- a cap on open connections, in all and from one address (`address_key`: one IPv4 address or
  one IPv6 /64). A connection past either is still read (under the deadline) and answered 503
  with a sentence saying why, then closed, rather than dropped without a word.

`autograd-lab serve` passes it to uvicorn; run by hand, uvicorn takes it as
`--http app.web.http.slow_clients:BoundedH11Protocol`. `/healthz` says whether the server runs with
it (`connections.bounded`). The limits are settings (settings.py), read once per process.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections import Counter

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.web.settings import Settings
from app.web.trusted_proxies import TrustedProxies

from .clients import address_key

__all__ = ["BoundedH11Protocol", "connection_report", "USAGE"]

USAGE = "--http app.web.http.slow_clients:BoundedH11Protocol"
RETRY_AFTER = 5  # seconds: connections come free as pages finish loading
# past this share of max_connections, an address holding more than a browser's connections
# (about 6, and one per page following a class) gets no more: the rest are kept for others
BUSY_SHARE = 0.75
BROWSER_CONNECTIONS = 8

_open_from: Counter[str] = Counter()  # address key -> connections open (the event loop's own)
_admitted = 0  # connections taken, all addresses: refused ones are never counted
REFUSED_GRACE = 1.0  # seconds a refused connection has to send the request its 503 answers
_used = False  # a connection came through BoundedH11Protocol in this process


@functools.cache
def _limits() -> Settings:
    # the protocol is made by uvicorn, not by create_app: it reads the same environment
    return Settings.from_env()


@functools.cache
def _trusted_proxies() -> TrustedProxies:
    """A trusted proxy's connections are everyone's behind it (trusted_proxies.py)."""
    return TrustedProxies(_limits().forwarded_allow_ips)


def connection_report() -> dict:
    """For /healthz: whether connections are bounded here, how many are open, the limits."""
    limits = _limits()
    report = {"bounded": _used, "open": _admitted,
              "max_connections": limits.max_connections,
              "per_address_connections": limits.per_address_connections,
              "request_read_timeout_s": limits.request_read_timeout,
              "send_timeout_s": limits.send_timeout}
    if not _used:
        report["detail"] = ("this server was started without its connection bounds (a request "
                            "sent slowly holds a connection for ever): start it with "
                            f"`autograd-lab serve`, or give uvicorn `{USAGE}`")
    return report


def _refusal(detail: str):
    """An ASGI app answering every request 503 with `detail`, and closing the connection."""
    body = json.dumps({"detail": detail, "code": "busy"}).encode()

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"retry-after", str(RETRY_AFTER).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    return app


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request to arrive and connection caps."""

    _deadline: asyncio.TimerHandle | None = None
    _stalled: asyncio.TimerHandle | None = None
    _address = ""
    _counted = False  # an admitted connection: in the counts until it is lost

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        global _used, _admitted
        super().connection_made(transport)
        _used = True
        limits = _limits()
        self._address = address_key(self.client[0], limits.loopback_addresses_apart) \
            if self.client else "unknown"
        refusal = self._why_refused(limits)
        if refusal is None:
            _open_from[self._address] += 1
            _admitted += 1
            self._counted = True
        else:
            # answered 503 once its request is here, given REFUSED_GRACE to send it, and never
            # counted: refused connections held open must not fill the caps for everyone else
            self.app = _refusal(refusal)
        self._arm()

    def _why_refused(self, limits: Settings) -> str | None:
        """Why this new connection is not taken, or None."""
        if _admitted >= limits.max_connections:
            return (f"the server has {limits.max_connections} connections open, as many as it "
                    "takes; try again in a few seconds")
        if self.client and self.client[0] in _trusted_proxies():
            return None  # everyone behind the proxy: held only to the server's cap
        held = _open_from[self._address]
        if held >= limits.per_address_connections:
            return (f"your network address has {limits.per_address_connections} connections "
                    "open to this server, as many as one address may; close some tabs, or "
                    "try again in a few seconds")
        if _admitted >= limits.max_connections * BUSY_SHARE and held >= BROWSER_CONNECTIONS:
            # the last quarter of the server's connections is kept for addresses holding few:
            # nine addresses of 240 slow connections each once shut every other person out
            return (f"the server is busy and your network address has {held} connections "
                    f"open, as many as one address may have while it is; close some tabs, or "
                    "try again in a few seconds")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        global _admitted
        self._disarm()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        if self._counted:
            self._counted = False
            _admitted -= 1
            _open_from[self._address] -= 1
            if _open_from[self._address] <= 0:
                del _open_from[self._address]
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()  # the request is all here (or the connection is over)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the connection now waits for its next request; one sent right behind this one may
        # have begun arriving already (its head here, its body not yet): timed the same
        if not self.transport.is_closing() and \
                self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self._arm()

    def pause_writing(self) -> None:
        super().pause_writing()
        # the client is not taking the answer: it gets send_timeout to take some
        if self._stalled is None:
            self._stalled = self.loop.call_later(_limits().send_timeout, self._not_reading)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _not_reading(self) -> None:
        self._stalled = None
        if not self.transport.is_closing():
            self.transport.abort()  # close() would wait to send what it is not reading

    def _arm(self) -> None:
        self._disarm()
        wait = _limits().request_read_timeout if self._counted else REFUSED_GRACE
        self._deadline = self.loop.call_later(wait, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            # nothing to answer: a client this slow is not reading either
            self.transport.close()
