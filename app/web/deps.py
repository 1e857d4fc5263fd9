"""Dependencies shared by the routers, as `Annotated` aliases: a lookup that 404s does it here."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request

from app.catalog import Scenario, load_catalog

from .traces import TraceService

__all__ = ["ScenarioDep", "TracesDep", "CatalogDep"]


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
        raise HTTPException(404, f"no scenario named {name!r}; the scenarios are: "
                                 f"{', '.join(catalog) or 'none'} (GET /api/scenarios)")
    return scenario


def get_traces(request: Request) -> TraceService:
    return request.app.state.traces


ScenarioDep = Annotated[Scenario, Depends(get_scenario)]
TracesDep = Annotated[TraceService, Depends(get_traces)]
