"""`autograd-lab upload-host`: runs uploads from the shared line (shared_queue.py) on this machine,
with this machine's sandbox exactly as a web process runs them: the upload lane of a
`TraceService` (its fork server, pool and confinement), as many at once as its slots.

Each run comes as a Procrastinate job carrying only the run's id. The upload host claims the run
(queued → running, in one UPDATE: a run stopped before it started is not run), runs it, stores its
Trace in the shared run store (an upsert keyed by the run) and closes its row. An abort (a stop from
any web process) cancels the task: the run's process group is killed and what it recorded is stored,
saying it was stopped. Every few seconds the upload host says it is alive and how many slots it has
(`upload_hosts`), which is the line's capacity.

An upload host that dies mid-run (its machine lost, its processes killed) stops sending
Procrastinate its heartbeat. Every live upload host looks for such stalled jobs: a run is retried
once on whichever upload host takes it next (a run has no effect outside its sandbox, so running it
again is safe), and failed with a message that says so if its upload host dies a second time. Before
retrying, an upload host sweeps what dead servers on its own machine left (their runs' cgroups and
uids), so a run killed with its upload host does not go on in the background.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import secrets
import signal
import socket
import time
from dataclasses import replace

from app.format import error_record, new_document
from app.format.notebook import annotate
from app.web.metrics import Metrics, outcome_of
from app.web.settings import Settings
from app.web.store.database import Lock, lock
from app.web.store.postgres import PostgresRunStore

from .run_book import BookedRun
from .shared_queue import QUEUE, TASK, end_without_trace, prepare_schema, procrastinate_app
from .trace_service import DeviceError, TraceService

__all__ = ["MetricsUnavailable", "UploadHost"]

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0  # Procrastinate's heartbeat and ours (upload_hosts)
STALLED_S = 10.0  # an upload host not heard from for this long is dead: its runs are retried
# an upload host whose sandbox lacks a layer waits and tries again this often, rather than
# exiting: a service manager restarting it would only run the self-test over and over
SANDBOX_RECHECK_S = 300.0
ATTEMPTS = 2  # a run whose upload host dies twice is failed, not run a third time
STOPPED = ("The run was stopped on request; the process running it stopped too before it could "
           "say what the run had recorded.")
STORE_PATIENCE_S = 300.0  # how long a finished run's Trace waits for the database to return
# how often Procrastinate's worker looks for a run when it heard of none (its LISTEN tells it
# at once, but its listening connection is made again only after a while when the database
# returns, and a run sent meanwhile waited its default 5 s): one small query a second
POLL_S = 1.0
RECONNECT_S = 1.0  # after the database went away, the soonest the upload host takes runs again
LOST = ("The process running this run stopped twice while running it (its machine was lost or "
        "it was killed), so it was not run a third time. The script is kept: run it again, and if "
        "this keeps happening, tell whoever runs the server.")


_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _named_only(app, address: str):
    """The metrics' WSGI app, answering only a Host that names where it listens (loopback's
    names, or the address it was given; any, bound to every interface): a page on
    evil.example whose name resolves to 127.0.0.1 must not read it (DNS rebinding), as the web
    process's HostGuard (http/guards.py, a layer above this one) refuses for its own pages."""
    names = None if address in ("0.0.0.0", "::") else _LOOPBACK_NAMES | {address.lower()}

    def checked(environ, start_response):
        host = environ.get("HTTP_HOST", "").strip().lower()
        if host.startswith("["):
            host = host[1:host.find("]")] if "]" in host else host
        elif host.count(":") == 1:
            host = host.rsplit(":", 1)[0]
        if names is None or host in names:
            return app(environ, start_response)
        start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"these metrics answer to {', '.join(sorted(names))} only, not to the name "
                f"{host[:100]!r}\n".encode()]

    return checked


class MetricsUnavailable(RuntimeError):
    """The metrics' port cannot be listened on; the message says what to set."""


class UploadHost:
    def __init__(self, settings: Settings, name: str | None = None) -> None:
        if not settings.database_url:
            raise ValueError("autograd-lab upload-host takes its runs from the shared line: set "
                             "AUTOGRAD_LAB_DATABASE_URL=postgresql://… as the web processes do")
        # an upload host machine serves no scenarios: none warmed, none pooled
        self.settings = replace(settings, warm_scenarios=False)
        # a random part: an upload host restarted in a container has the same host name and pid 1,
        # and must not be taken for the one that died (its runs would never be retried)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self._beating_since: float | None = None  # our heartbeats reach the database since
        self.traces = TraceService(self.settings)
        self.slots = self.traces.upload_workers()
        self.store = PostgresRunStore(settings.database_url, settings.store_max_runs,
                                      settings.store_max_bytes, settings.store_max_run_bytes,
                                      pool_size=self.slots + 4,
                                      people_per_address=settings.per_address_people)
        # the runs' threads: a run holds one for its whole life, so never the loop's default
        self._threads = concurrent.futures.ThreadPoolExecutor(
            self.slots + 2, thread_name_prefix="autograd-lab-upload")
        # what it ran, for its own /metrics listener (upload_host_metrics_port; no web process
        # runs an upload in the shared mode, so only upload hosts can count them)
        self.metrics = Metrics()
        self.meter = self.metrics.runs("upload")
        self.metrics.watch_starts(self.traces.start_failures.counts)
        self.metrics.watch_upload_host(self.slots,
                                       lambda: self.traces.uploads.gate.load()[0])
        self.metrics.watch_pool(self.store.database.pool_stats)
        self._metrics_server = None

    # ---- one run ------------------------------------------------------------------------------

    def claim(self, run_id: str, job_id: int) -> dict | None:
        """The run's submission, now marked running on this upload host (with its job's id, by
        which a stop reaches it); None if it is no longer waiting (stopped before it
        started, or run already)."""
        with self.store.database.transaction() as db:
            cur = db.execute(
                "UPDATE uploads SET state = 'running', started = now(), "
                "attempts = attempts + 1, host = %s, job_id = %s "
                "WHERE id = %s AND state = 'queued' "
                "RETURNING client, address, name, source, device, time_limit, notebook, "
                "EXTRACT(EPOCH FROM now() - created)::float8 AS waited",
                (self.name, job_id, run_id))
            row = cur.fetchone()
            return None if row is None else dict(zip([c.name for c in cur.description], row,
                                                     strict=True))

    def run(self, run_id: str, submission: dict, job: BookedRun) -> None:
        """Run it in the sandbox, store its Trace, close its row, whatever happens."""
        state = "done"
        name, source, device = submission["name"], submission["source"], submission["device"]
        lane = self.traces.uploads
        began = time.monotonic()
        try:
            # through the lane's gate (never full: Procrastinate starts at most `slots`): it
            # counts the runs going on, so a run alone on the machine gets a plain run's
            # threads and one among others gets one thread, as in a web process's lane
            with lane.gate.enter():
                doc = lane.run(source, name, [], device, started=job.attach,
                               cancel=job.stop_event)
            if doc.get("error") and doc["error"]["type"] == "Stopped":
                state = "stopped"
        except DeviceError as exc:  # asked for a device this machine lacks: said in its Trace
            doc = new_document(name, source, device, None)
            doc["error"] = error_record("DeviceUnavailable", str(exc))
        except Exception:  # noqa: BLE001 - the upload host failed, not the script
            log.exception("run %s could not be run", run_id)
            state = "failed"
            doc = new_document(name, source, device, None)
            doc["error"] = error_record("ServerError", "The server could not run this run (its "
                                        "upload host's log says why). The script is kept: run it "
                                        "again.")
        # counted as a web process counts its lane's runs: from sent (the row's `created`,
        # the database's clock) to taken, then the run itself
        self.meter.ran("ServerError" if state == "failed" else
                       outcome_of(doc, stopped=state == "stopped"),
                       submission.get("waited"), time.monotonic() - began)
        notebook = submission.get("notebook")
        annotate(doc, json.loads(notebook) if notebook else None)
        # the run is done and its Trace in hand: a database away for a while must not lose it
        # (nor leave the run "running" for ever, holding its person's share)
        self._until_stored(run_id, lambda: self._close(run_id, doc, state))

    def _close(self, run_id: str, doc: dict, state: str) -> None:
        """Store the Trace and close the run's row in one transaction, if the run is still
        this upload host's: one that was taken from it while it ran (it was thought dead: the
        database was away too long) is stored by its other attempt, not from here."""
        packed = self.store.pack(doc, run_id)  # gzip, before the row is locked
        error = doc.get("error")
        with self.store.database.transaction() as db:
            row = db.execute("SELECT client, address FROM uploads WHERE id = %s "
                             "AND state = 'running' AND host = %s FOR UPDATE",
                             (run_id, self.name)).fetchone()
            if row is None:
                log.warning("run %s was given to another upload host meanwhile: its Trace is not "
                            "stored from here", run_id)
                return
            over = self.store.write(db, run_id, packed, owner=row[0], address=row[1])
            db.execute("UPDATE uploads SET state = %s, ended = now(), kept_whole = %s, "
                       "events = %s, error_type = %s, detail = %s WHERE id = %s",
                       (state, packed[2], len(doc.get("events") or ()),
                        error.get("type") if isinstance(error, dict) else None,
                        error.get("message") if state == "failed" else None, run_id))
        if over:
            self.store.prune(keep=run_id)

    def _until_stored(self, run_id: str, store) -> None:
        """`store()`, tried again while the database cannot be reached, for up to
        STORE_PATIENCE_S; then given up (logged: the run's row says running until its upload host
        is seen to have died)."""
        from app.web.store.common import StoreUnavailable

        deadline, pause = time.monotonic() + STORE_PATIENCE_S, 0.5
        while True:
            try:
                return store()
            except StoreUnavailable:
                if time.monotonic() > deadline:
                    raise
                log.warning("run %s: the store cannot be reached; trying again in %.1f s",
                            run_id, pause)
                time.sleep(pause)
                pause = min(10.0, pause * 2)

    async def task(self, context, run_id: str) -> None:
        """The Procrastinate task: claim, run in a thread, and on an abort kill the run and
        wait for what it recorded to be stored before the job is marked aborted."""
        loop = asyncio.get_running_loop()
        submission = await loop.run_in_executor(self._threads, self.claim, run_id,
                                                context.job.id)
        if submission is None:
            return
        job = BookedRun(run_id, submission["client"], submission["name"], submission["time_limit"])
        work = loop.run_in_executor(self._threads, self.run, run_id, submission, job)
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            job.stop()
            await work
            raise

    # ---- an upload host that died --------------------------------------------------------------

    def after_death(self, run_id: str, job_id: int) -> str:
        """What becomes of a run whose upload host died (its job `job_id` stalled):
        - "retry": back in line, once (the job is put back by the caller);
        - "fetch again": its upload host died between taking the job and claiming the run;
        - "failed": its upload host died a second time, or a stop was asked (then "stopped"):
          its Trace says so, and the caller ends the job;
        - "finish": the run had ended (its row says so) before its upload host died: only the job
          is left, and it holds its person's lock until it is ended;
        - "skip": the job is no longer stalled (another upload host saw to it first)."""
        with self.store.database.transaction() as db:
            job = db.execute("SELECT j.status, j.abort_requested FROM procrastinate_jobs j "
                             "LEFT JOIN procrastinate_workers w ON w.id = j.worker_id "
                             "WHERE j.id = %s AND j.status = 'doing' AND (j.worker_id IS NULL "
                             "OR w.last_heartbeat < now() - make_interval(secs => %s)) "
                             "FOR UPDATE OF j", (job_id, STALLED_S)).fetchone()
            if job is None:
                return "skip"
            abort = bool(job[1])
            row = db.execute(
                "SELECT u.state, u.attempts, u.name, u.source, u.device, u.notebook FROM "
                "uploads u WHERE u.id = %s AND NOT EXISTS (SELECT 1 FROM upload_hosts h "
                "WHERE h.name = u.host AND h.seen > now() - make_interval(secs => %s)) "
                "FOR UPDATE OF u", (run_id, STALLED_S)).fetchone()
            if row is None:
                return "skip"  # its upload host is alive after all
            state, attempts, name, source, device, notebook = row
            if state not in ("queued", "running"):
                return "finish"
            if abort or attempts >= ATTEMPTS:
                kind, message, ended = ("Stopped", STOPPED, "stopped") if abort else \
                    ("UploadHostLost", LOST, "failed")
                end_without_trace(self.store, db, run_id, (name, source, device, notebook),
                                  ended, kind, message)
                return "failed"
            if state == "queued":
                return "fetch again"
            db.execute("UPDATE uploads SET state = 'queued', host = NULL, started = NULL "
                       "WHERE id = %s", (run_id,))
            return "retry"

    def _fail_unqueued(self) -> None:
        """Runs booked by a web process that stopped before handing them to the line (no job
        after a minute): failed with what to do, so they hold no one's share or place."""
        message = ("This run was booked but never reached the line (the web process that took "
                   "it stopped). The script is kept: run it again.")
        with self.store.database.transaction() as db:
            rows = db.execute(
                "SELECT u.id, u.name, u.source, u.device, u.notebook FROM uploads u "
                "WHERE u.state = 'queued' AND u.created < now() - interval '1 minute' "
                "AND NOT EXISTS (SELECT 1 FROM procrastinate_jobs j WHERE j.queue_name = %s "
                "AND j.args->>'run_id' = u.id) FOR UPDATE OF u SKIP LOCKED",
                (QUEUE,)).fetchall()
            for run_id, *submission in rows:
                end_without_trace(self.store, db, run_id, tuple(submission), "failed",
                                  "ServerError", message)

    async def _see_to_stalled(self, jobs) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if not self._may_judge_others():
                continue
            try:
                await self._one_look(jobs, loop)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the database is away: look again later
                log.warning("could not look for runs of dead upload hosts", exc_info=True)

    async def _one_look(self, jobs, loop) -> None:
        """One pass over the stalled jobs, by one upload host at a time (an advisory lock held for
        the pass: two upload hosts must not both put one run back in line)."""
        from procrastinate.jobs import Status

        from app.runner.sandbox import cgroups, identity

        with self.store.database.transaction() as db:
            if not lock(db, Lock.LOOK_FOR_DEAD, wait=False):
                return  # another upload host is looking now
            await loop.run_in_executor(self._threads, self._fail_unqueued)
            stalled = await jobs.job_manager.get_stalled_jobs(
                queue=QUEUE, seconds_since_heartbeat=STALLED_S)
            if not stalled:
                return
            # a dead upload host on this machine left its runs going: end them first
            await loop.run_in_executor(self._threads, cgroups.sweep)
            await loop.run_in_executor(self._threads, identity.sweep_orphans)
            for job in stalled:
                run_id = job.task_kwargs.get("run_id")
                decision = await loop.run_in_executor(self._threads, self.after_death,
                                                      run_id, job.id)
                log.warning("run %s: its upload host stopped heartbeating: %s", run_id, decision)
                if decision in ("retry", "fetch again"):
                    await jobs.job_manager.retry_job(job)
                elif decision in ("failed", "finish"):
                    await jobs.job_manager.finish_job(
                        job, Status.FAILED if decision == "failed" else Status.SUCCEEDED,
                        delete_job=True)

    # ---- the process --------------------------------------------------------------------------

    def _beat(self, alive: bool = True) -> None:
        with self.store.database.transaction() as db:
            if alive:
                db.execute("INSERT INTO upload_hosts (name, slots, seen) VALUES (%s, %s, now()) "
                           "ON CONFLICT (name) DO UPDATE SET slots = EXCLUDED.slots, "
                           "seen = EXCLUDED.seen", (self.name, self.slots))
            else:
                db.execute("DELETE FROM upload_hosts WHERE name = %s", (self.name,))

    async def _heartbeat(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(self._threads, self._beat)
                if self._beating_since is None:
                    self._beating_since = time.monotonic()
            except Exception:  # noqa: BLE001 - the database is away: try again, keep running
                self._beating_since = None
                log.warning("could not tell the shared line this upload host is alive",
                            exc_info=True)
            await asyncio.sleep(HEARTBEAT_S)

    def _may_judge_others(self) -> bool:
        """Only an upload host whose own heartbeats have reached the database for longer than
        STALLED_S judges others dead: after an outage every heartbeat is old, and an upload host
        must not take runs from upload hosts that were merely cut off with it."""
        return self._beating_since is not None and \
            time.monotonic() - self._beating_since > STALLED_S

    def sandbox_refusal(self) -> str | None:
        """Why this upload host must not take runs, or None: its sandbox self-test (every layer
        tried, as a web process tries them) found a layer missing or not holding. A web
        process whose sandbox is incomplete still runs its own machine's people's code; a
        upload host runs strangers' code only. With the self-test off (AUTOGRAD_LAB_SELFTEST=0: a
        machine the operator trusts), it takes runs with what it has and says so."""
        from app.runner.selftest import SelfTest, run_selftest

        from .sandbox_status import sandbox_status

        report = None
        if self.settings.selftest:
            if self.traces.fork_server is not None:  # the probes fork through it, once ready
                self.traces.fork_server.settle()
            report = run_selftest(self.traces.fork_server)
        status = sandbox_status(self.settings, SelfTest(report=report))
        if status["ok"]:
            return None
        if not self.settings.selftest:
            log.warning("autograd-lab upload-host %s: %s; taking runs anyway", self.name,
                        status["summary"])
            return None
        return (f"this machine's sandbox is not complete ({status['summary']}), so this upload "
                "host takes no runs (they are other people's code); give it the missing layers "
                "(docs/how-a-script-is-run.md), or, on a machine you trust, start it with "
                "AUTOGRAD_LAB_SELFTEST=0")

    async def serve(self) -> int:
        """Take runs until stopped (SIGINT or SIGTERM: the runs going on finish first). While
        this machine's sandbox is not complete it takes none, says which layer, and tries again
        every SANDBOX_RECHECK_S; stopped before it ever took runs, 2."""
        prepare_schema(self.store)
        self.serve_metrics()
        self.traces.start(scenarios=False)
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()  # SIGINT or SIGTERM: the runs going on finish, then it ends
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        while (refusal := await loop.run_in_executor(self._threads,
                                                     self.sandbox_refusal)) is not None:
            log.error("autograd-lab upload-host %s: %s. Waiting: it tries again in %d s "
                      "(a service manager restarting it would only repeat this)", self.name,
                      refusal, SANDBOX_RECHECK_S)
            try:
                await asyncio.wait_for(stop.wait(), SANDBOX_RECHECK_S)
            except TimeoutError:
                continue
            self.traces.stop()
            self.store.close()
            self._threads.shutdown(wait=False)
            self.stop_metrics()
            return 2
        jobs = procrastinate_app(self.settings.database_url, sync=False)
        jobs.task(name=TASK, queue=QUEUE, pass_context=True)(self.task)
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            log.warning("autograd-lab upload-host %s: %d slot(s), taking runs", self.name,
                        self.slots)
            while not stop.is_set():
                try:
                    await self._take_runs(jobs, stop)
                except Exception:  # noqa: BLE001 - the database went away: taken up below
                    log.warning("the line could not be reached", exc_info=True)
                if not stop.is_set():
                    # Procrastinate's worker ends when the database is away too long; this
                    # one stays, and takes runs again once it is back
                    log.warning("taking runs again once the database answers")
                    await self._until_reachable(stop)
        finally:
            heartbeat.cancel()
            try:
                self._beat(alive=False)
            except Exception:  # noqa: BLE001 - its heartbeat ages out instead
                pass
            self.traces.stop()
            self.store.close()
            self._threads.shutdown(wait=False)
            self.stop_metrics()
        return 0

    def serve_metrics(self) -> None:
        """Its /metrics on upload_host_metrics_port (0: none), from the start: one waiting for
        its sandbox shows it too (its workers that failed to start). prometheus_client's own
        small HTTP server, in a thread: no token, so it listens on loopback unless told."""
        port = self.settings.upload_host_metrics_port
        if not port:
            return
        from prometheus_client import start_http_server

        address = self.settings.upload_host_metrics_address
        try:
            self._metrics_server, _ = start_http_server(port, addr=address,
                                                        registry=self.metrics.registry)
            self._metrics_server.set_app(_named_only(self._metrics_server.get_app(), address))
        except OSError as exc:
            raise MetricsUnavailable(
                f"its metrics cannot listen on {address} port {port} ({exc.strerror}): "
                "choose a free port with AUTOGRAD_LAB_UPLOAD_HOST_METRICS_PORT, or 0 for "
                "none") from None
        log.warning("autograd-lab upload-host %s: metrics at http://%s:%d/metrics", self.name,
                    address if ":" not in address else f"[{address}]", port)

    def stop_metrics(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None

    async def _until_reachable(self, stop: asyncio.Event) -> None:
        """RECONNECT_S, and then for as long as the store's probe says the database is away
        (store/outage.py): Procrastinate's worker is started again within a moment of its
        return, and not over and over while it is away (each start waits 30 s to connect)."""
        deadline = time.monotonic() + RECONNECT_S
        while not stop.is_set() and (time.monotonic() < deadline or
                                     self.store.database.outage.down):
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except TimeoutError:
                pass

    async def _mend_line(self, jobs) -> None:
        """Procrastinate's pool made whole the moment the store's probe sees the database back
        (store/outage.py): its worker asks for a connection with a 30 s wait, and psycopg_pool
        does not try again for a waiting request once it gave a connection up, so the worker
        (and every run) waited out those 30 s after the database had returned."""
        was_down = False
        while True:
            await asyncio.sleep(0.25)
            down = self.store.database.outage.down
            if was_down and not down:
                try:
                    await jobs.connector.pool.check()
                except Exception:  # noqa: BLE001 - away again: the next return mends it
                    log.warning("could not renew the line's connections", exc_info=True)
            was_down = down

    async def _take_runs(self, jobs, stop: asyncio.Event) -> None:
        """Procrastinate's worker until `stop` (then it lets the runs going on finish) or
        until it ends by itself (its database connection lost)."""
        async with jobs.open_async():
            stalled = asyncio.create_task(self._see_to_stalled(jobs))
            mending = asyncio.create_task(self._mend_line(jobs))
            # delete_jobs: a run's job is done with once it ends (its state is the `uploads`
            # row's): the jobs table does not grow with every run ever sent
            worker = asyncio.create_task(jobs.run_worker_async(
                queues=[QUEUE], concurrency=self.slots, name=self.name,
                abort_job_polling_interval=1.0, delete_jobs="always",
                fetch_job_polling_interval=POLL_S,
                install_signal_handlers=False, update_heartbeat_interval=HEARTBEAT_S,
                stalled_worker_timeout=STALLED_S))
            stopping = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait({worker, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if stop.is_set():
                    worker.cancel()  # Procrastinate stops taking runs; those going on finish
                await asyncio.gather(worker, return_exceptions=True)
            finally:
                stopping.cancel()
                stalled.cancel()
                mending.cancel()
