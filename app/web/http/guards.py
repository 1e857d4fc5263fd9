"""What every request passes before a router sees it (ASGI middleware, wired in app.py).

- HostGuard: the Host header must name this server (DNS rebinding: a page on evil.example
  whose name resolves to 127.0.0.1 reaches a loopback server under its own name, and could then
  read its answers). Compared in full, port stripped; never by prefix.
- CrossSiteGuard: a request that changes something (any method but GET, HEAD, OPTIONS) comes
  from the app's own pages, or from a program. Browsers say where a request comes from
  (`Sec-Fetch-Site`, `Origin`); a cross-site one is refused, because a multipart POST is a
  "simple" request that any page may send with `mode: "no-cors"`. A program (no such headers)
  must send the token or a JSON body, which no page can send to another site without a CORS
  preflight this server never grants.
- SecurityHeaders: every HTML page forbids inline script and other hosts' content (CSP).

Starlette's TrustedHostMiddleware would do the Host check, but it cuts the port at the first
colon, which turns "[::1]:8000" into "[": hence the few lines here.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from app.web.settings import Settings

from .middleware import ResponseHeaders

__all__ = ["CrossSiteGuard", "HostGuard", "SecurityHeaders", "allowed_hosts", "forwarded",
           "host_name", "WILDCARD_BINDS"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
_SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}
# headers a proxy adds: a request that carries one was relayed for someone else
_FORWARDING = (b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-real-ip",
               b"x-forwarded-proto", b"x-client-ip", b"true-client-ip", b"cf-connecting-ip")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; font-src 'self'; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def allowed_hosts(settings: Settings) -> set[str] | None:
    """The host names this server answers to; None: any (bound to every interface, with no
    AUTOGRAD_LAB_ALLOWED_HOSTS given: the names that reach it are not known here)."""
    extra = {h.strip().lower().strip("[]") for h in settings.allowed_hosts.split(",")
             if h.strip()}
    if settings.host in WILDCARD_BINDS and not extra:
        return None
    names = set(LOOPBACK_NAMES) | extra
    if settings.host not in WILDCARD_BINDS:
        names.add(settings.host.lower().strip("[]"))
    return names


def host_name(value: str) -> str:
    """The name in a Host header, without its port: "[::1]:8000" -> "::1"."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _headers(scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers", ())}


def forwarded(scope) -> bool:
    """Did a proxy relay this request (it carries a forwarding header)?"""
    headers = _headers(scope)
    return any(name in headers for name in _FORWARDING)


async def _refuse(send, status: int, detail: str, code: str) -> None:
    """An AppError's JSON answer, written here: these guards run outside the app, before its
    error handlers (error_handler.py), and a refused request is no page to render."""
    body = json.dumps({"detail": detail, "code": code}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class HostGuard:
    def __init__(self, app, settings: Settings) -> None:
        self.app = app
        self.names = allowed_hosts(settings)

    async def __call__(self, scope, receive, send):
        if scope["type"] in ("http", "websocket") and self.names is not None:
            host = host_name(_headers(scope).get(b"host", b"").decode("latin-1"))
            if host not in self.names:
                await _refuse(send, 400, f"this server does not answer to the name {host!r} "
                              f"(it answers to {', '.join(sorted(self.names))}); to serve it "
                              "under that name, start it with AUTOGRAD_LAB_ALLOWED_HOSTS=NAME",
                              "unknown_host")
                return
        await self.app(scope, receive, send)


class CrossSiteGuard:
    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] not in _SAFE_METHODS:
            problem = self.problem(_headers(scope), scope["method"])
            if problem:
                await _refuse(send, 403, problem, "cross_site")
                return
        await self.app(scope, receive, send)

    @staticmethod
    def problem(headers: dict[bytes, bytes], method: str = "POST") -> str | None:
        site = headers.get(b"sec-fetch-site", b"").decode("latin-1").lower()
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if site:
            if site in ("same-origin", "none"):
                return None
            return ("this request came from another site's page (Sec-Fetch-Site: "
                    f"{site}); run code from this server's own pages, or from a program")
        if origin:
            # compared in full: scheme://host:port of the page against this server's Host
            if origin != "null" and urlsplit(origin).netloc.lower() == host:
                return None
            return (f"this request came from a page of another origin ({origin}); run code "
                    "from this server's own pages, or from a program")
        kind = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
        if kind.lower() == "application/json" or headers.get(b"authorization"):
            return None
        if method != "POST":
            return None  # PUT, DELETE...: no page can send them elsewhere without a preflight
        return ("a program must send a JSON body ({\"source\": ...}) or the server's token "
                "(Authorization: Bearer TOKEN); a form post from a browser must come from this "
                "server's own pages")


class SecurityHeaders(ResponseHeaders):
    """CSP and friends on every HTML page (drawings get their own, stricter policy)."""

    def extra(self, scope, headers):
        more = []
        if headers.get(b"content-type", b"").startswith(b"text/html") and \
                b"content-security-policy" not in headers:
            more.append((b"content-security-policy", CSP.encode()))
        if b"x-content-type-options" not in headers:
            more.append((b"x-content-type-options", b"nosniff"))
        more.append((b"referrer-policy", b"same-origin"))
        return more
