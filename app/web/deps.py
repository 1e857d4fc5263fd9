"""Every dependency a route takes, as an `Annotated` alias (as FastAPI's full-stack template
does): the services kept in `app.state`, who the request is from, the class a request acts in,
the scenario a path names. A route names what it needs in its signature and never reaches into
`request.app.state` itself; a lookup that fails (404, 403) fails here, before the route runs.

The class sessions are `async` dependencies on purpose: a class lives on the event loop (one
process's classroom holds no lock), and FastAPI runs plain functions in its thread pool."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.templating import Jinja2Templates

from app.catalog import Scenario, load_catalog
from app.render import font_scale
from app.runner import SelfTest
from app.web.auth import check_metrics_reader, check_teacher, check_uploader
from app.web.classes.classroom import Classroom
from app.web.classes.session import ClassSession
from app.web.http.clients import client_address, client_key
from app.web.metrics import Metrics
from app.web.runs.drawings import Drawings, Layout
from app.web.runs.trace_service import TraceService
from app.web.runs.uploads import UploadService
from app.web.settings import Settings
from app.web.store.sqlite import RunStore

from .errors import AppError

__all__ = ["AddressDep", "CatalogDep", "ClassroomDep", "ClientDep", "DrawingsDep", "LayoutDep",
           "MemberSessionDep", "MetricsDep", "MetricsReaderOnly", "ScenarioDep", "SelfTestDep",
           "revoked_refusal", "revoked_teacher",
           "SettingsDep", "StoreDep", "TeacherOnly", "TeacherSessionDep", "TemplatesDep",
           "TracesDep", "UploaderOnly", "UploadsDep"]


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_traces(request: Request) -> TraceService:
    return request.app.state.traces


def get_drawings(request: Request) -> Drawings:
    return request.app.state.drawings


def get_store(request: Request) -> RunStore:
    """The run store: SQLite, or PostgreSQL in the shared mode; routes see one interface."""
    return request.app.state.store


def get_uploads(request: Request) -> UploadService:
    return request.app.state.uploads


def get_classroom(request: Request) -> Classroom:
    """The classes: this process's, or the shared mode's kept in PostgreSQL."""
    return request.app.state.classroom


def get_selftest(request: Request) -> SelfTest:
    return request.app.state.selftest


def get_templates(request: Request) -> Jinja2Templates:
    return request.app.state.templates


def get_metrics(request: Request) -> Metrics:
    """This app's metrics; 404 where the `metrics` setting is off, as if there were no such
    route (asked before the token: a server that serves none says so to anyone)."""
    if not request.app.state.settings.metrics:
        raise AppError(404, "this server serves no metrics: start it with "
                            "AUTOGRAD_LAB_METRICS=1 to have them at /metrics", "no_metrics")
    return request.app.state.metrics


SettingsDep = Annotated[Settings, Depends(get_settings)]
TracesDep = Annotated[TraceService, Depends(get_traces)]
DrawingsDep = Annotated[Drawings, Depends(get_drawings)]
StoreDep = Annotated[RunStore, Depends(get_store)]
UploadsDep = Annotated[UploadService, Depends(get_uploads)]
ClassroomDep = Annotated[Classroom, Depends(get_classroom)]
SelfTestDep = Annotated[SelfTest, Depends(get_selftest)]
TemplatesDep = Annotated[Jinja2Templates, Depends(get_templates)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]

# who the request is from: a signed session cookie, else the address (http/clients.py)
ClientDep = Annotated[str, Depends(client_key)]
AddressDep = Annotated[str, Depends(client_address)]

# guards, as dependencies that return nothing: `_: TeacherOnly` in a route's signature
TeacherOnly = Annotated[None, Depends(check_teacher)]
UploaderOnly = Annotated[None, Depends(check_uploader)]
MetricsReaderOnly = Annotated[None, Depends(check_metrics_reader)]


async def revoked_teacher(request: Request, session: ClassSession) -> str | None:
    """The name of the named teacher who started this class, once their token is revoked; None
    while it is live, or for a class the server's token started. The teacher's browser keeps
    the class's cookie, and revoking the token must end what it could do and see there."""
    holder = session.state.teacher_name
    if not holder.startswith("teacher:"):
        return None
    name = holder.removeprefix("teacher:")
    # a question to the store (remembered a few seconds): off the event loop
    live = await asyncio.to_thread(request.app.state.teachers.is_live, name)
    return None if live else name


def revoked_refusal(name: str, code: str) -> AppError:
    return AppError(403, f"the token of teacher {name!r} was revoked, so this browser teaches "
                         f"class {code} no more; whoever holds the server's token can end the "
                         "class from /admin, or give you a new token (`autograd-lab teachers "
                         "add`) to start another", "teacher_revoked")


async def teacher_session(request: Request, code: Annotated[str, Path()],
                          classroom: ClassroomDep, client: ClientDep,
                          address: AddressDep) -> ClassSession:
    """The class `code` as its teacher acts in it (403 for anyone else, or once the named
    teacher who started it was revoked; 404 for no class)."""
    session = await classroom.teaching(code, client, address)
    if (name := await revoked_teacher(request, session)) is not None:
        raise revoked_refusal(name, session.state.code)
    return session


async def member_session(request: Request, code: Annotated[str, Path()],
                         classroom: ClassroomDep, client: ClientDep,
                         address: AddressDep) -> ClassSession:
    """The class `code` as a member (or its teacher) sees it; a browser new to it joins (403
    if it was removed, 429 past its address's share, 404 for no class)."""
    session = await classroom.get(code, address, client)
    # the teacher's browser reads the teacher's view (answers, who sent what): not once revoked
    if client == session.state.teacher and \
            (name := await revoked_teacher(request, session)) is not None:
        raise revoked_refusal(name, session.state.code)
    return session


TeacherSessionDep = Annotated[ClassSession, Depends(teacher_session)]
MemberSessionDep = Annotated[ClassSession, Depends(member_session)]


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


ScenarioDep = Annotated[Scenario, Depends(get_scenario)]


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
