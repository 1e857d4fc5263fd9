"""Who a request comes from, for a fair share of the workers and a place in a class: the
browser's session cookie, set by the first page it opens, else the client's address (a program,
or a browser that refuses cookies). The cookie is signed by this server process (HMAC with a
key made at start), so a made-up value counts as no cookie: one machine cannot become thirty
people by inventing cookies, in the run queue or in a class's answers. Not an identity to trust
beyond that: a token, the loopback rule or a membership of an open class (a signed cookie the
class admitted and the teacher has not removed) decides who may run code at all (auth.py); the
same key says whose a run is (the run queue's `started_by`: a student sends only their own)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from http.cookies import SimpleCookie

from fastapi import Request

from app.web.client_keys import address_key, is_browser

from .middleware import ResponseHeaders

__all__ = ["COOKIE", "ClientCookie", "address_key", "client_address", "client_key",
           "is_browser", "new_cookie_value", "use_signing_key"]

COOKIE = "autograd_lab_client"
# one machine: a restart hands out new cookies (nothing else is lost); with a shared store, the
# key every web process reads from it (use_signing_key), so any of them knows any cookie
_KEY = secrets.token_bytes(32)
_FORM = re.compile(r"([A-Za-z0-9_-]{24})\.([A-Za-z0-9_-]{22})")


def use_signing_key(key: bytes) -> None:
    """Sign and check cookies with `key` from now on (app.py, at start, in the shared mode)."""
    global _KEY
    if len(key) < 16:
        raise ValueError("a cookie signing key takes at least 16 bytes")
    _KEY = key


def _signature(token: str) -> str:
    digest = hmac.new(_KEY, token.encode(), hashlib.sha256).digest()[:16]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_cookie_value() -> str:
    token = secrets.token_urlsafe(18)
    return f"{token}.{_signature(token)}"


def _valid(value: str) -> bool:
    match = _FORM.fullmatch(value)
    return bool(match) and hmac.compare_digest(match.group(2), _signature(match.group(1)))


def client_key(request: Request) -> str:
    value = request.cookies.get(COOKIE, "")
    if _valid(value):
        return "cookie:" + value.split(".", 1)[0]
    return "address:" + (request.client.host if request.client else "unknown")


def client_address(request: Request) -> str:
    """The address the connection comes from: a browser's limits also hold per address, times
    `per_address_people` (settings.py), because a fresh cookie is one page load away."""
    return address_key(request.client.host if request.client else "unknown",
                       request.app.state.settings.loopback_addresses_apart)


class ClientCookie(ResponseHeaders):
    """Gives every browser a signed session cookie the first time it loads a page (and a new
    one when the one it sends is not this server's: made up, or from before a restart)."""

    def extra(self, scope, headers):
        if not headers.get(b"content-type", b"").startswith(b"text/html"):
            return []
        sent = b"; ".join(v for k, v in scope.get("headers", ()) if k == b"cookie")
        jar = SimpleCookie()
        try:
            jar.load(sent.decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed Cookie header: hand out a new cookie
            jar = SimpleCookie()
        if COOKIE in jar and _valid(jar[COOKIE].value):
            return []
        # Lax: sent when a person comes back through a link, so Stop still knows their run;
        # no cross-site POST carries it (and CrossSiteGuard refuses those anyway)
        value = (f"{COOKIE}={new_cookie_value()}; Path=/; HttpOnly; SameSite=Lax; "
                 "Max-Age=2592000")
        return [(b"set-cookie", value.encode())]
