"""Every error the web layer answers is an `AppError` (app/web/errors.py: a status, a sentence
a person can act on, a short code for programs), and it is answered here, once: JSON
`{"detail", "code"}` to the API and to programs, the error page (templates/error.html) to a
browser asking for a page.

The exception kinds of the layers below (which know nothing of HTTP) become AppErrors in one
table, `KINDS`:

- Busy (every worker and queue place taken): 503 with Retry-After;
- NoUploadHost (the shared mode with no live upload host): 503, Retry-After 30;
- TooMany (this person's share of runs is taken): 429 with Retry-After;
- UnknownDevice (not a device name) and DeviceError (not on this machine): 422;
- UnknownVariant: 404; any other OptionError (an option or value the scenario lacks): 422;
- EventNotFound (no such backward event to draw): 404; RenderError (cannot be drawn): 422;
- StoreUnavailable (the shared store's PostgreSQL is down): 503 with Retry-After.

Starlette's own HTTPException (no route at a path, a method the route lacks; and any FastAPI
HTTPException still raised) is answered the same way. Request-validation errors keep their
own answer: FastAPI's list of machine records becomes one sentence (422; the records stay
under `errors` for programs).
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.utils import is_body_allowed_for_status_code
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.catalog import OptionError, UnknownVariant
from app.devices import UnknownDevice
from app.render import EventNotFound, RenderError
from app.web.errors import AppError
from app.web.runs.gate import Busy
from app.web.runs.run_book import TooMany
from app.web.runs.shared_queue import NoUploadHost
from app.web.runs.trace_service import DeviceError
from app.web.store.common import StoreUnavailable

__all__ = ["KINDS", "as_app_error", "install_error_handlers", "wants_page"]

RETRY_AFTER_BUSY = 5  # seconds
RETRY_AFTER_STORE = 30  # seconds: a database restarting takes longer than a busy worker

_RETRY = {"Retry-After": str(RETRY_AFTER_BUSY)}
# kind -> (status, code, headers); looked up along the exception's MRO, so that a subclass
# (UnknownVariant of OptionError) finds its own row before its parent's
KINDS: dict[type[Exception], tuple[int, str, dict[str, str] | None]] = {
    Busy: (503, "busy", _RETRY),
    NoUploadHost: (503, "no_upload_host", {"Retry-After": "30"}),
    TooMany: (429, "too_many", _RETRY),
    UnknownDevice: (422, "unknown_device", None),
    DeviceError: (422, "device_unavailable", None),
    UnknownVariant: (404, "unknown_variant", None),
    OptionError: (422, "invalid_option", None),
    EventNotFound: (404, "no_event", None),
    StoreUnavailable: (503, "store_unavailable", {"Retry-After": str(RETRY_AFTER_STORE)}),
    RenderError: (422, "cannot_draw", None),
}

# a heading for the error page by code, where a plainer one than the status's helps
_TITLES = {"no_scenario": "No such scenario", "no_class": "No such class",
           "no_run": "No such run", "no_page": "No such page", "unknown_variant": "No such variant",
           "address_full": "The class is full for your network address",
           "removed_from_class": "Removed from the class"}


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _no_route(request: Request, exc: StarletteHTTPException) -> AppError:
    """Starlette's bare "Not Found" / "Method Not Allowed", said as what to do instead."""
    path = request.url.path
    if exc.status_code == 404:
        if _is_api(request):
            return AppError(404, f"there is no API route at {path}: the routes are listed at "
                                 "/docs (and /openapi.json)", "no_route")
        return AppError(404, f"there is no page at {path}: the scenarios are listed at /",
                        "no_page")
    return AppError(405, f"{request.method} is not allowed on {path}"
                         + (f"; use {exc.headers['Allow']}" if exc.headers and
                            "Allow" in exc.headers else ""),
                    headers=exc.headers)


def as_app_error(request: Request, exc: Exception) -> AppError:
    """Any exception this module answers, as the AppError that says it."""
    if isinstance(exc, AppError):
        return exc
    if isinstance(exc, StarletteHTTPException):
        if exc.status_code in (404, 405) and exc.detail == _phrase(exc.status_code):
            return _no_route(request, exc)
        return AppError(exc.status_code, str(exc.detail), headers=exc.headers)
    for kind in type(exc).__mro__:
        if kind in KINDS:
            status, code, headers = KINDS[kind]
            place = getattr(exc, "place", None)
            return AppError(status, str(exc), code, headers,
                            facts={"place": place} if place is not None else None)
    raise TypeError(f"no HTTP answer for {type(exc).__name__}")  # a handler wired by mistake


# not pages: what is under these is read by programs and scripts, never shown as a page
_API_PREFIXES = ("/api/", "/static/")
_API_PATHS = ("/api", "/healthz", "/openapi.json", "/metrics")


def _is_api(request: Request) -> bool:
    path = request.url.path
    return path.startswith(_API_PREFIXES) or path in _API_PATHS


def wants_page(request: Request) -> bool:
    """Does this request want the error as a page? Not under /api/ (nor /static/, /healthz);
    elsewhere yes, unless it asks for JSON and not for HTML (a program's
    `Accept: application/json`). Browsers send text/html; curl and httpx send */*."""
    if _is_api(request):
        return False
    accept = request.headers.get("accept", "").lower()
    asks_json = "application/json" in accept and "text/html" not in accept
    return not asks_json or "*/*" in accept


async def _answer(request: Request, exc: Exception) -> Response:
    error = as_app_error(request, exc)
    # every 429 and 503 the app answers passes here (not the connection caps' 503, answered
    # before the app: http/slow_clients.py), counted by its code
    request.app.state.metrics.refused(error.status, error.code)
    if not is_body_allowed_for_status_code(error.status):
        return Response(status_code=error.status, headers=error.headers)
    if wants_page(request):
        title = _TITLES.get(error.code) or _phrase(error.status)
        return request.app.state.templates.TemplateResponse(
            request, "error.html", {"title": title, "detail": error.detail, "code": error.code,
                                    "status": error.status},
            status_code=error.status, headers=error.headers)
    return JSONResponse({**error.facts, "detail": error.detail, "code": error.code},
                        status_code=error.status, headers=error.headers)


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


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    # one handler for all; registered per kind because Starlette looks handlers up by class
    for kind in (AppError, StarletteHTTPException, *KINDS):
        app.add_exception_handler(kind, _answer)
