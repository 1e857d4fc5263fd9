"""Dependencies shared by the routers, as `Annotated` aliases: a lookup that 404s does it here."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request

from app.catalog import Scenario, load_catalog

from .traces import TraceService

__all__ = ["ScenarioDep", "TracesDep", "CatalogDep"]


def get_catalog(request: Request) -> dict[str, Scenario]:
    folder = request.app.state.scenarios_dir
    return load_catalog(folder)


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
