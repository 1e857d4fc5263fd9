"""A pure-ASGI middleware that adds headers to a response as it starts (pure ASGI rather than
Starlette's BaseHTTPMiddleware, which buffers and would hold up streamed answers)."""

from __future__ import annotations

__all__ = ["ResponseHeaders"]


class ResponseHeaders:
    """Subclasses say which headers to add: `extra(scope, headers) -> [(name, value), ...]`,
    given the request's scope and the response's headers (lower-case names, as bytes)."""

    def __init__(self, app) -> None:
        self.app = app

    def extra(self, scope, headers: dict[bytes, bytes]) -> list[tuple[bytes, bytes]]:
        raise NotImplementedError

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                more = self.extra(scope, {k.lower(): v for k, v in headers})
                if more:
                    message = {**message, "headers": headers + more}
            await send(message)

        await self.app(scope, receive, with_headers)
