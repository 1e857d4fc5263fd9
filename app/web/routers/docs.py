"""The OpenAPI page (/docs) served with the vendored Swagger UI.

FastAPI's default /docs and /redoc load their scripts and styles from a CDN; this app must work
offline, so the same page is built from static/vendor/swagger-ui-dist-*/ instead, and the
online spec validator Swagger UI would call is switched off.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse

router = APIRouter()

SWAGGER = "vendor/swagger-ui-dist-5.35.0"


@router.get("/docs", include_in_schema=False, response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url, title="autograd-lab API",
        swagger_js_url=str(request.url_for("static", path=f"{SWAGGER}/swagger-ui-bundle.js")),
        swagger_css_url=str(request.url_for("static", path=f"{SWAGGER}/swagger-ui.css")),
        swagger_favicon_url=str(request.url_for("static", path="favicon.svg")),
        swagger_ui_parameters={"validatorUrl": None})
