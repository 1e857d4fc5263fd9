"""HTML pages. Each shows what a JSON route returns (see api.py), through Jinja2 templates.

The scenario page is a shell: its narration and source come from the catalogue here, and the
browser fetches the run itself from /api/scenarios/{name}/trace, because a run takes seconds and
the page should show progress rather than hang.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from ..deps import CatalogDep, ScenarioDep

# HTML for people, kept out of the OpenAPI page; their JSON twins are in api.py
router = APIRouter(include_in_schema=False)


def _page(request: Request, template: str, **context) -> HTMLResponse:
    return request.app.state.templates.TemplateResponse(request, template, context)


@router.get("/", response_class=HTMLResponse)
def index(request: Request, catalog: CatalogDep):
    return _page(request, "index.html", scenarios=[s.summary() for s in catalog.values()])


@router.get("/scenarios/{name}", response_class=HTMLResponse)
def scenario_page(request: Request, scenario: ScenarioDep, catalog: CatalogDep):
    names = list(catalog)
    at = names.index(scenario.name)
    neighbours = {"previous": catalog[names[at - 1]].summary() if at > 0 else None,
                  "next": catalog[names[at + 1]].summary() if at + 1 < len(names) else None}
    return _page(request, "scenario.html", scenario=scenario.summary(),
                 narration=scenario.narration,
                 source=scenario.path.read_text(encoding="utf-8"), **neighbours)


@router.get("/scenarios/{name}/compare", response_class=HTMLResponse)
def compare_page(request: Request, scenario: ScenarioDep):
    """Every variant of one lesson side by side (its runs are fetched by the browser)."""
    return _page(request, "compare.html", scenario=scenario.summary())


@router.get("/own-code", response_class=HTMLResponse)
def own_code(request: Request):
    """Placeholder for running a pasted script: says plainly that it is not available yet."""
    return _page(request, "own_code.html")
