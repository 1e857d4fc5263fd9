"""The app factory: settings in, a FastAPI app out. Routers are wired here and nowhere else."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from app import __version__
from app.catalog import load_catalog
from app.render import KINDS
from app.render.legend import UNIT_KINDS
from app.resources import resource_dir
from app.runner import SelfTest
from app.web.audit import REFUSALS, install_audit_log
from app.web.classes.classroom import Classroom
from app.web.classes.in_process import InProcessClassroom
from app.web.classes.shared import SharedClassroom
from app.web.http.access_log import ACCESS_LOG
from app.web.http.clients import ClientCookie, use_signing_key
from app.web.http.error_handler import install_error_handlers
from app.web.http.guards import CrossSiteGuard, HostGuard, SecurityHeaders
from app.web.http.request_ids import RequestIds
from app.web.http.static_assets import ForeverStaticFiles, content_version
from app.web.metrics import Metrics
from app.web.pages.highlight import source_lines
from app.web.pages.narration import inline_html, narration_html
from app.web.runs.drawings import Drawings
from app.web.runs.first_look import FirstLook
from app.web.runs.in_process_queue import InProcessQueue
from app.web.runs.queue import RunQueue
from app.web.runs.sandbox_status import announce
from app.web.runs.shared_queue import SharedQueue
from app.web.runs.trace_service import TraceService
from app.web.runs.uploads import UploadService
from app.web.store.postgres import SIGNING_KEY, PostgresRunStore
from app.web.store.sqlite import RunStore
from app.web.store.teachers import SharedTeacherTokens, TeacherTokens

from .routers import admin, api, classes, docs, metrics, pages, runs
from .settings import Settings
from .trusted_proxies import warn_if_local_users_trusted

__all__ = ["create_app"]


def create_app(settings: Settings | None = None, scenarios_dir: Path | None = None) -> FastAPI:
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # the workers and the self-test start with the server, not with the app object, so
        # that building an app (tests, `--factory` imports) starts no process
        # a store path the server cannot write, or a database it cannot reach, fails here
        app.state.store.open()
        if mode.shared:  # every web process signs cookies with the key they share
            use_signing_key(app.state.store.secret(SIGNING_KEY))
        announce(settings, app.state.selftest)
        warn_if_local_users_trusted(settings.forwarded_allow_ips)
        folder = app.state.scenarios_dir
        # the shared mode's uploads run in `autograd-lab upload-host` processes, not here
        app.state.traces.start(lambda: load_catalog(folder), uploads=not mode.shared)
        # the shared mode's classes: every web process's changes, heard here (on one machine
        # there is nothing to hear, and listen returns at once)
        listening = asyncio.create_task(app.state.classroom.listen())
        ACCESS_LOG.install(settings)
        sweeping = asyncio.create_task(_sweep_held_back())
        try:
            yield
        finally:
            listening.cancel()
            sweeping.cancel()
            REFUSALS.flush()  # the refusals held back in windows still open are said
            ACCESS_LOG.uninstall()  # and the access lines
            app.state.traces.stop()
            mode.queue.close()
            app.state.store.close()

    # docs_url/redoc_url off: FastAPI's own pages load Swagger UI from a CDN (routers/docs.py)
    app = FastAPI(title="autograd-lab", version=__version__, docs_url=None, redoc_url=None,
                  lifespan=lifespan,
                  description="See PyTorch autograd at work: graphs, backward order and "
                              "per-use gradient contributions of scripts.")
    app.state.settings = settings
    app.state.scenarios_dir = scenarios_dir or resource_dir("scenarios")
    # kept whether or not /metrics serves them (the `metrics` setting): recording costs a
    # counter's increment, and the services need not know whether anyone reads
    app.state.metrics = Metrics()
    app.state.traces = TraceService(settings, scenario_meter=app.state.metrics.runs("scenario"))
    app.state.metrics.watch_starts(app.state.traces.start_failures.counts)
    # graphviz and grouping, cached apart from Traces
    app.state.drawings = Drawings(settings, meter=app.state.metrics.drawings())
    # started with the server (lifespan), not with the app; its probes fork as runs do
    app.state.selftest = SelfTest(fork_server=app.state.traces.fork_server)
    mode = _mode(settings, app.state.traces, app.state.drawings, app.state.metrics)
    app.state.store, app.state.classroom = mode.store, mode.classroom
    # an address's share of the upload drawings counts a shared room's members, as the queue does
    app.state.drawings.people_at = mode.classroom.people_at
    app.state.teachers = SharedTeacherTokens(mode.store.database) if mode.shared else \
        TeacherTokens(mode.store)
    classroom = mode.classroom
    app.state.metrics.watch_streams(lambda: classroom.open_streams,
                                    lambda: classroom.following_streams)
    if mode.shared:
        app.state.metrics.watch_pool(mode.store.database.pool_stats)
    app.state.uploads = UploadService(mode.queue, mode.store, settings.upload_timeout)
    templates = Jinja2Templates(directory=str(resource_dir("templates")))
    templates.env.globals.update(legend=KINDS, unit_legend=UNIT_KINDS, version=__version__)
    templates.env.filters.update(narration=narration_html, inline=inline_html,
                                 source_lines=source_lines)
    app.state.templates = templates
    static = resource_dir("static")
    # the pages' own addresses: named by the files' content, kept by browsers for good; the
    # plain folder stays for addresses written down elsewhere (static_assets.py)
    app.mount(f"/static/v/{content_version(static)}", ForeverStaticFiles(directory=str(static)),
              name="static")
    app.mount("/static", StaticFiles(directory=str(static)), name="static-plain")
    install_error_handlers(app)
    # outermost last: the Host is checked first, then where a state change comes from
    app.add_middleware(ClientCookie)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(CrossSiteGuard)
    app.add_middleware(HostGuard, settings=settings)
    # an id on every answer, refusals by the guards included (audit.py writes it in its lines)
    app.add_middleware(RequestIds)
    install_audit_log()
    if settings.forwarded_allow_ips:
        # outermost: every guard and limit sees the address a trusted proxy forwarded for
        # (trusted_proxies.py); uvicorn's own reading of the headers
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.forwarded_allow_ips)
    app.include_router(api.router)
    app.include_router(runs.router)
    app.include_router(classes.router)
    app.include_router(pages.router)
    app.include_router(docs.router)
    app.include_router(metrics.router)
    app.include_router(admin.router)
    return app


@dataclass(frozen=True)
class Mode:
    """The parts that differ between one machine and a course's shared database: where runs are
    kept, where classes live, where uploads wait and run. Chosen once, here."""
    shared: bool
    store: RunStore
    classroom: Classroom
    queue: RunQueue


async def _sweep_held_back() -> None:
    """Until cancelled: the counts of refusals and access lines held back are written within
    seconds of their window's end, not at the next line (a stranger who goes quiet after a
    burst would leave no count for hours, or none if the server is killed) (audit.py,
    http/access_log.py)."""
    while True:
        await asyncio.sleep(HELD_BACK_SWEEP_S)
        REFUSALS.sweep()
        ACCESS_LOG.sweep()


HELD_BACK_SWEEP_S = 5.0


def _mode(settings: Settings, traces: TraceService, drawings: Drawings,
          metrics: Metrics) -> Mode:
    """One machine: a SQLite file, classes in memory, uploads queued and run in this process.
    With `database_url`: PostgreSQL shared by every web process and `autograd-lab upload-host`
    (runs, classes, the line), each scenario traced once for all of them. Either way a class
    whose room shares one network address counts its members there in the queue
    (`people_at`)."""
    bounds = (settings.store_max_runs, settings.store_max_bytes, settings.store_max_run_bytes)
    share = (settings.per_client_running, settings.per_client_queued)
    if settings.database_url:
        store = PostgresRunStore(settings.database_url, *bounds,
                                 people_per_address=settings.per_address_people)
        classroom = SharedClassroom(store.database, settings.max_classes,
                                    people_per_address=settings.per_address_people,
                                    retention_days=settings.ended_class_retention_days)
        queue = SharedQueue(store, *share, settings.queue_size, settings.per_address_people,
                            classroom.people_at, settings.wait_for_upload_hosts)
        traces.shared_scenarios = store
        return Mode(True, store, classroom, queue)
    store = RunStore(Path(settings.store_path).expanduser(), *bounds,
                     people_per_address=settings.per_address_people)
    classroom = InProcessClassroom(settings.max_classes,
                                   people_per_address=settings.per_address_people)
    store.teachers = classroom.open_teachers
    queue = InProcessQueue(traces.uploads, store, *share, settings.per_address_people,
                           classroom.people_at, stored=FirstLook(store, drawings),
                           meter=metrics.runs("upload"))
    return Mode(False, store, classroom, queue)
