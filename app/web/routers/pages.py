"""HTML pages. Each shows what a JSON route returns (see api.py), through Jinja2 templates."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..deps import CatalogDep, ScenarioDep

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def index(request: Request, catalog: CatalogDep):
    return request.app.state.templates.TemplateResponse(
        request, "index.html", {"scenarios": [s.summary() for s in catalog.values()]})


@router.get("/scenarios/{name}", response_class=HTMLResponse)
def scenario_page(request: Request, scenario: ScenarioDep):
    source = scenario.path.read_text(encoding="utf-8")
    return request.app.state.templates.TemplateResponse(
        request, "scenario.html",
        {"scenario": scenario.summary(), "narration": scenario.narration, "source": source})
