"""HTML pages. Each shows what a JSON route returns (see api.py), through Jinja2 templates.

The scenario page is a shell: its narration and source come from the catalogue here, and the
browser fetches the run itself from /api/scenarios/{name}/trace, because a run takes seconds and
the page should show progress rather than hang.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.format.notebook import listing_rows
from app.web.auth import upload_policy
from app.web.deps import (
    CatalogDep,
    MemberSessionDep,
    ScenarioDep,
    SettingsDep,
    StoreDep,
    TemplatesDep,
    UploadsDep,
)
from app.web.store.common import run_link

from .runs import stored_head

# HTML for people, kept out of the OpenAPI page; their JSON twins are in api.py
router = APIRouter(include_in_schema=False)


def _page(request: Request, templates: Jinja2Templates, template: str,
          **context) -> HTMLResponse:
    return templates.TemplateResponse(request, template, context)


@router.get("/", response_class=HTMLResponse)
def index(request: Request, templates: TemplatesDep, catalog: CatalogDep):
    return _page(request, templates, "index.html",
                 scenarios=[s.summary() for s in catalog.values()],
                 policy=upload_policy(request))


@router.get("/scenarios/{name}", response_class=HTMLResponse)
def scenario_page(request: Request, templates: TemplatesDep, scenario: ScenarioDep,
                  catalog: CatalogDep):
    names = list(catalog)
    at = names.index(scenario.name)
    neighbours = {"previous": catalog[names[at - 1]].summary() if at > 0 else None,
                  "next": catalog[names[at + 1]].summary() if at + 1 < len(names) else None}
    return _page(request, templates, "scenario.html", scenario=scenario.summary(),
                 narration=scenario.narration, steps=scenario.steps,
                 # the page names the scenario's question; its answer stays on the server
                 class_question={"prompt": scenario.class_question["prompt"],
                                 "choices": scenario.class_question["choices"]}
                 if scenario.class_question else None,
                 source=scenario.source(), **neighbours)  # without its CLASS_QUESTION


@router.get("/scenarios/{name}/compare", response_class=HTMLResponse)
def compare_page(request: Request, templates: TemplatesDep, scenario: ScenarioDep):
    """Every variant of one scenario side by side (its runs are fetched by the browser)."""
    return _page(request, templates, "compare.html", scenario=scenario.summary())


@router.get("/own-code", response_class=HTMLResponse)
def own_code(request: Request, templates: TemplatesDep, settings: SettingsDep):
    """Paste or upload a script and run it; says plainly when this server refuses uploads."""
    return _page(request, templates, "own_code.html", policy=upload_policy(request),
                 upload_timeout=settings.upload_timeout)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, templates: TemplatesDep, store: StoreDep,
             uploads: UploadsDep, run_id: str):
    """A stored run, shown as a scenario is; the browser reads it from /api/runs/{id}. The
    page needs only the run's head (store/sqlite.py), not its Trace."""
    head = stored_head(store, uploads, run_id)
    notebook = head.get("notebook")  # an uploaded notebook: its cells in the listing
    run = {"id": run_id, "name": notebook["name"] if notebook else head["name"],
           "device": head["device"], "link": run_link(run_id)["link"]}
    return _page(request, templates, "run.html", run=run, source=head["source"],
                 torch=head["torch"],
                 rows=listing_rows(notebook, head["source"]) if notebook else None)


@router.get("/c/{code}", response_class=HTMLResponse)
def join_class(request: Request, templates: TemplatesDep, session: MemberSessionDep):
    """A student's way in: the page joins the class and then opens what the teacher shows.
    No such class: the error page (and wrong codes are counted per address)."""
    return _page(request, templates, "class.html", code=session.code)
