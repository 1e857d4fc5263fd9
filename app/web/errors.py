"""`AppError`, the one error type the web layer raises: an HTTP status, a sentence that says what
to do, a short code for programs. Services raise it without knowing HTTP's machinery; the one
handler that answers it (and the lower layers' exceptions) is `app/web/http/error_handler.py`."""

from __future__ import annotations

__all__ = ["AppError"]

_CODES = {400: "bad_request", 401: "token_needed", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "too_large",
          415: "unsupported_media_type", 422: "invalid", 429: "too_many", 503: "busy"}


class AppError(Exception):
    """The one error type the web layer raises: an HTTP status, a sentence that says what to
    do (`detail`), and a short machine code the page can act on (`code`)."""

    def __init__(self, status: int, detail: str, code: str | None = None,
                 headers: dict[str, str] | None = None, facts: dict | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.code = code or _CODES.get(status, "error")
        self.headers = headers
        self.facts = facts or {}  # more for programs, beside detail and code (a full line's place)
