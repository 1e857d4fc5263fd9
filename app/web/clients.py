"""Who a request comes from, for a fair share of the workers: the browser's session cookie, set
by the first page it opens, else the client's address (a program, or a browser that refuses
cookies). Not an identity to trust: a token or the loopback rule decides who may run code at
all (auth.py); this only keeps one person's ten runs from taking the machine from the others."""

from __future__ import annotations

import re
import secrets

from fastapi import Request

from .middleware import ResponseHeaders

__all__ = ["COOKIE", "ClientCookie", "client_key"]

COOKIE = "autograd_lab_client"
_VALID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def client_key(request: Request) -> str:
    value = request.cookies.get(COOKIE, "")
    if _VALID.fullmatch(value):
        return "cookie:" + value
    return "address:" + (request.client.host if request.client else "unknown")


class ClientCookie(ResponseHeaders):
    """Gives every browser a random session cookie the first time it loads a page."""

    def extra(self, scope, headers):
        sent = b"; ".join(v for k, v in scope.get("headers", ()) if k == b"cookie")
        has = any(part.strip().startswith(COOKIE.encode() + b"=") for part in sent.split(b";"))
        if has or not headers.get(b"content-type", b"").startswith(b"text/html"):
            return []
        # Lax: sent when a person comes back through a link, so Stop still knows their run;
        # no cross-site POST carries it (and CrossSiteGuard refuses those anyway)
        value = (f"{COOKIE}={secrets.token_urlsafe(18)}; Path=/; HttpOnly; SameSite=Lax; "
                 "Max-Age=2592000")
        return [(b"set-cookie", value.encode())]
