"""Dependencies shared by the routers, as `Annotated` aliases: a lookup that 404s does it here."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import Depends, Path, Query, Request

from app.catalog import Scenario, load_catalog
from app.render import font_scale
from app.web.runs.drawings import Layout
from app.web.runs.trace_service import TraceService

from .errors import AppError

__all__ = ["ScenarioDep", "TracesDep", "CatalogDep", "LayoutDep"]


_CATALOG_LOCK = threading.Lock()


def get_catalog(request: Request) -> dict[str, Scenario]:
    """The scenarios, read again only when a file in the folder changed.

    Reading is serialized: `ast.parse` is not thread-safe on CPython 3.11 (parallel requests
    in FastAPI's thread pool raised "AST constructor recursion depth mismatch")."""
    folder = request.app.state.scenarios_dir
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*.py")))
    with _CATALOG_LOCK:
        cached = getattr(request.app.state, "catalog", None)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        catalog = load_catalog(folder)
        request.app.state.catalog = (stamp, catalog)
        return catalog


CatalogDep = Annotated[dict[str, Scenario], Depends(get_catalog)]


def get_scenario(catalog: CatalogDep, name: Annotated[str, Path()]) -> Scenario:
    scenario = catalog.get(name)
    if scenario is None:
        raise AppError(404, f"no scenario named {name!r}; the scenarios are: "
                            f"{', '.join(catalog) or 'none'} (GET /api/scenarios)", "no_scenario")
    return scenario


def get_traces(request: Request) -> TraceService:
    return request.app.state.traces


ScenarioDep = Annotated[Scenario, Depends(get_scenario)]
TracesDep = Annotated[TraceService, Depends(get_traces)]


def get_layout(
    layout: Annotated[str | None, Query(pattern="^(flat|modules)$",
                                        description="flat: every node; modules (the default "
                                        "for a big graph): drawn by module")] = None,
    depth: Annotated[int | None, Query(ge=0, le=64, description="module depth drawn closed; "
                                       "0: every module open, repeats still folded")] = None,
    open_: Annotated[list[str], Query(alias="open", max_length=200,
                                      description="module paths (or folds, `layers.0-47`) "
                                      "to draw open")] = [],  # noqa: B006 - FastAPI copies it
    fold: bool = True,
    font: Annotated[float, Query(ge=1, le=3, description="the labels' type size, 1 to 3 "
                                 "times the default (rounded to a half); the page's "
                                 "presenter mode asks for larger type")] = 1.0,
) -> Layout:
    if any(len(path) > 1000 for path in open_):
        raise AppError(422, "a module path in `open` is longer than 1000 characters")
    return Layout(flat=layout == "flat", depth=depth, opened=frozenset(open_), fold=fold,
                  font=font_scale(font))


LayoutDep = Annotated[Layout, Depends(get_layout)]
