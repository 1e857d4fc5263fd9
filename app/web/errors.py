"""Every error the app returns is JSON with a `detail` string a person can act on, and each kind
of failure is turned into its HTTP answer here, once.

- request-validation errors: FastAPI's list of machine records becomes one sentence (422; the
  records stay under `errors` for programs);
- Busy (every worker and queue place taken): 503 with Retry-After;
- TooMany (this person's share of runs is taken): 429 with Retry-After;
- UnknownDevice (not a device name) and DeviceError (not on this machine): 422;
- UnknownVariant: 404; any other OptionError (an option or value the scenario lacks): 422;
- EventNotFound (no such backward event to draw): 404; RenderError (cannot be drawn): 422.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from app.catalog import OptionError, UnknownVariant
from app.devices import UnknownDevice
from app.render import EventNotFound, RenderError

from .gate import Busy
from .jobs import TooMany
from .traces import DeviceError

__all__ = ["install_error_handlers"]

RETRY_AFTER_BUSY = 5  # seconds


def _sentence(error: dict) -> str:
    where = [str(p) for p in error.get("loc", ()) if p not in ("query", "path", "body")]
    place = {"query": "query parameter", "path": "path part"}.get(
        error.get("loc", ("",))[0], "value")
    got = error.get("input")
    return f"{place} {'.'.join(where)!r}: {error.get('msg', 'is not valid')}" + (
        f" (got {got!r})" if isinstance(got, str | int | float) else "")


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = list(exc.errors())
    detail = "; ".join(_sentence(e) for e in errors) or "the request is not valid"
    return JSONResponse({"detail": detail, "errors": [
        {k: e.get(k) for k in ("loc", "msg", "type")} for e in errors]}, status_code=422)


def _answer(status: int, headers: dict[str, str] | None = None):
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status, headers=headers)
    return handler


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Busy, _answer(503, {"Retry-After": str(RETRY_AFTER_BUSY)}))
    app.add_exception_handler(TooMany, _answer(429, {"Retry-After": str(RETRY_AFTER_BUSY)}))
    app.add_exception_handler(UnknownDevice, _answer(422))
    app.add_exception_handler(DeviceError, _answer(422))
    app.add_exception_handler(UnknownVariant, _answer(404))
    app.add_exception_handler(OptionError, _answer(422))
    app.add_exception_handler(EventNotFound, _answer(404))
    app.add_exception_handler(RenderError, _answer(422))
