"""The OpenAPI page (/docs) served with the vendored Swagger UI.

FastAPI's default /docs and /redoc load their scripts and styles from a CDN and start Swagger UI
with an inline script; this app must work offline and its pages forbid inline script, so the
same page is a template of ours (templates/docs.html) that loads static/vendor/swagger-ui-dist-*/
and static/js/swagger_init.js, with the online spec validator switched off.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.web.deps import TemplatesDep

router = APIRouter()

SWAGGER = "vendor/swagger-ui-dist-5.35.0"


@router.get("/docs", include_in_schema=False, response_class=HTMLResponse)
def docs(request: Request, templates: TemplatesDep) -> HTMLResponse:
    return templates.TemplateResponse(
        request, "docs.html", {"swagger": SWAGGER, "openapi_url": request.app.openapi_url})
