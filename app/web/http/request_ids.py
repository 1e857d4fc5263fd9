"""Every request gets an id of its own: in the answer's `X-Request-ID` header and in every audit
line written while it is handled (audit.py), so an operator can find the log lines of the request
a person reports. The id is made here, never taken from the request: a client choosing it could
make its lines look like someone else's."""

from __future__ import annotations

import secrets
from contextvars import ContextVar

from .middleware import ResponseHeaders

__all__ = ["RequestIds", "request_id"]

_current: ContextVar[str] = ContextVar("autograd_lab_request_id", default="")
_KEY = "autograd_lab.request_id"


def request_id() -> str:
    """The id of the request being handled, or "" outside one. Routes run in threads copy the
    context they were called from, so the id reaches them too."""
    return _current.get()


class RequestIds(ResponseHeaders):
    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope[_KEY] = secrets.token_hex(8)
        token = _current.set(scope[_KEY])
        try:
            await super().__call__(scope, receive, send)
        finally:
            _current.reset(token)

    def extra(self, scope, headers):
        return [(b"x-request-id", scope[_KEY].encode())]
