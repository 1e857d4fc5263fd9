"""JSON API: scenarios, their traces and drawings. The pages read the same functions."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.catalog import RESERVED_QUERY_NAMES, ScenarioSummary
from app.devices import parse_device
from app.format import Trace, load_schema
from app.format.flow import gradient_flow
from app.web.deps import (
    CatalogDep,
    DrawingsDep,
    LayoutDep,
    ScenarioDep,
    SelfTestDep,
    SettingsDep,
    StoreDep,
    TracesDep,
    UploadsDep,
)
from app.web.errors import AppError
from app.web.http.responses import MEDIA, document, drawing
from app.web.http.slow_clients import connection_report
from app.web.runs.sandbox_status import sandbox_status
from app.web.runs.trace_service import DEVICES_WAIT, DevicesUnknown
from app.web.store.common import StoreUnavailable

router = APIRouter(tags=["autograd-lab"])


def scenario_run(request: Request, scenario, traces, variant, device) -> tuple[tuple, Trace]:
    """Trace one scenario variant (http/error_handler.py answers what goes wrong)."""
    device = parse_device(device)
    # every query parameter that is not the page's own is one of the scenario's options (k=2)
    given = {k: v for k, v in request.query_params.items() if k not in RESERVED_QUERY_NAMES}
    # Defaults are spelled out so that `?k=3` and no `k` share one run in the cache, and the
    # Trace's script.args say exactly how to reproduce the run on the command line.
    options = {k: str(spec["default"]) for k, spec in scenario.options.items()
               if "default" in spec} | given
    return traces.scenario_trace(scenario, variant, options, device)


@router.get("/healthz")
def healthz(settings: SettingsDep, selftest: SelfTestDep, traces: TracesDep,
            store: StoreDep, uploads: UploadsDep) -> dict:
    """The server answers; `sandbox` is the start-up self-test's result (`state` "running"
    until it is done); `workers` says whether runs are forked from the fork server; `scenarios`
    whether every scenario is traced yet, and how many seconds after start that was done;
    `connections` whether slow clients and connection counts are bounded (http/slow_clients.py);
    `store` where runs are kept and whether it answers (a shared store's database may be down:
    the status is then "degraded", and scenarios are still served); `uploads` who runs
    uploads and how their line stands: in the shared mode the live upload hosts, and the status
    is "degraded" while there are none, since an upload would then run nowhere. It is also
    "degraded" while this process's workers fail to start (`workers.start_failures.failing`:
    the last start failed and none reached READY since; app/runner/start_failures.py)."""
    reachable, where = store.reachable()
    line = {"reachable": False, "detail": where}  # a shared line is in that database
    if reachable:
        try:
            line = uploads.line()
        except StoreUnavailable as exc:
            line = {"reachable": False, "detail": str(exc)}
    workers = traces.workers()
    working = reachable and line.get("reachable", True) and \
        not ("upload_hosts" in line and not line["upload_hosts"]) and \
        not workers["start_failures"]["failing"]
    return {"status": "ok" if working else "degraded",
            "sandbox": sandbox_status(settings, selftest),
            "workers": workers, "scenarios": traces.warmth(),
            "uploads": line,
            "connections": connection_report(),
            "store": {"reachable": reachable, "detail": where}}


@router.get("/api/scenarios")
def list_scenarios(catalog: CatalogDep) -> list[ScenarioSummary]:
    return [s.summary() for s in catalog.values()]


@router.get("/api/scenarios/{name}")
def get_scenario(scenario: ScenarioDep) -> dict:
    return {**scenario.summary(), "narration": scenario.narration}


@router.get("/api/scenarios/{name}/trace", response_model=Trace)
def scenario_trace(request: Request, scenario: ScenarioDep, traces: TracesDep,
                   variant: str | None = None, device: str = "cpu") -> Response:
    """Run the scenario (or take the cached run) and return its Trace document.

    Any other query parameter is one of the scenario's options, e.g. `?k=2` for reused_layer.
    A script that fails still returns 200: the document's `error` says where and why."""
    return document(scenario_run(request, scenario, traces, variant, device)[1])


@router.get("/api/scenarios/{name}/graph.{fmt}")
def scenario_graph(request: Request, scenario: ScenarioDep, traces: TracesDep,
                   drawings: DrawingsDep, fmt: str, layout: LayoutDep,
                   variant: str | None = None, device: str = "cpu",
                   event: int | None = None, view: int | None = None) -> Response:
    if fmt not in MEDIA:
        return drawing(fmt, bytes)  # the 404, before any run
    key, doc = scenario_run(request, scenario, traces, variant, device)
    return drawing(fmt, lambda: drawings.drawing(key, lambda: doc, event, fmt, view, layout))


@router.get("/api/scenarios/{name}/gradient-flow")
def scenario_gradient_flow(request: Request, scenario: ScenarioDep, traces: TracesDep,
                           variant: str | None = None, device: str = "cpu") -> dict:
    """Each module's gradient norm and mean |grad| in depth order, after each backward pass,
    and each parameter's norm across the passes (app/format/flow.py)."""
    return gradient_flow(scenario_run(request, scenario, traces, variant, device)[1])


@router.get("/api/devices")
async def devices(traces: TracesDep) -> dict:
    """The devices a worker process can use on this machine (cpu, and cuda:N when present).
    Asked of a worker once per process: the first requests wait for it (on the event loop,
    holding no thread), then are told it is still being checked."""
    deadline = time.monotonic() + DEVICES_WAIT
    while True:
        try:
            return traces.devices(wait=0)
        except DevicesUnknown as exc:  # never a 500 while the question is out
            if not exc.still_checking or time.monotonic() >= deadline:
                raise AppError(503, str(exc), "devices_checking" if exc.still_checking else
                               "devices_unknown", headers={"Retry-After": "5"}) from exc
        await asyncio.sleep(0.1)


@router.get("/api/schema/trace")
def trace_schema() -> dict:
    return load_schema()
