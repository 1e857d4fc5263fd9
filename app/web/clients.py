"""Who a request comes from, for a fair share of the workers: the browser's session cookie, set
by the first page it opens, else the client's address (a program, or a browser that refuses
cookies). Not an identity to trust: a token or the loopback rule decides who may run code at
all (auth.py); this only keeps one person's ten runs from taking the machine from the others."""

from __future__ import annotations

import re
import secrets

from fastapi import Request

__all__ = ["COOKIE", "ClientCookie", "client_key"]

COOKIE = "autograd_lab_client"
_VALID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def client_key(request: Request) -> str:
    value = request.cookies.get(COOKIE, "")
    if _VALID.fullmatch(value):
        return "cookie:" + value
    return "address:" + (request.client.host if request.client else "unknown")


class ClientCookie:
    """Gives every browser a random session cookie the first time it loads a page."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookies = dict(h for h in scope.get("headers", ()) if h[0] == b"cookie").get(b"cookie", b"")
        has = COOKIE.encode() + b"=" in cookies

        async def with_cookie(message):
            if message["type"] == "http.response.start" and not has:
                headers = list(message.get("headers", ()))
                kind = dict(headers).get(b"content-type", b"")
                if kind.startswith(b"text/html"):
                    value = f"{COOKIE}={secrets.token_urlsafe(18)}; Path=/; HttpOnly; " \
                            "SameSite=Strict; Max-Age=2592000"
                    headers.append((b"set-cookie", value.encode()))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_cookie)
