"""Who may run code on this server.

Bound to loopback, the server is one person's: uploads are open. Bound to any other address,
anyone who can reach it could run code on it, so uploads need the token the server was
started with (`--token` or AUTOGRAD_LAB_TOKEN), sent as `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import secrets

from fastapi import HTTPException, Request

__all__ = ["LOOPBACK_HOSTS", "is_loopback", "check_uploader"]

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def check_uploader(request: Request) -> None:
    """Raise the HTTP error that tells this caller how to be allowed to run code."""
    settings = request.app.state.settings
    if is_loopback(settings.host):
        return
    if not settings.token:
        raise HTTPException(403, f"this server listens on {settings.host} and has no token, so "
                                 "it runs no uploaded code; restart it with --token TOKEN (or "
                                 "AUTOGRAD_LAB_TOKEN) and send that token")
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(value.strip(), settings.token):
        raise HTTPException(401, "running code here needs the server's token: send the header "
                                 "'Authorization: Bearer TOKEN' (the page asks for it once)",
                            headers={"WWW-Authenticate": "Bearer"})
