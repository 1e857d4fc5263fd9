"""Every error the app returns is JSON with a `detail` string a person can act on.

FastAPI already does this for `HTTPException`; its request-validation errors, though, come as a
list of machine records. The page shows `detail` as it is, so those are turned into one
sentence here (the records stay under `errors` for programs).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

__all__ = ["install_error_handlers"]


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
