"""The upload queue past one machine (`AUTOGRAD_LAB_DATABASE_URL`): a `RunQueue` whose line is
in PostgreSQL and whose upload hosts are `autograd-lab upload-host` processes on any machine
(upload_host.py), through Procrastinate, a maintained job queue on PostgreSQL.

What lives where:
- the `uploads` table holds each run's submission and its state (queued, running, done,
  stopped, failed), whose it is, and what the page decides by once it is stored (events,
  error type); a web process answers status, owner and place in line from it;
- Procrastinate's job carries only the run's id, on the `uploads` queue, with the person as its
  lock (one running run per person, in the order they were sent, whatever
  `per_client_running` says: in this mode it bounds a person's runs running and waiting
  together, with `per_client_queued`);
- the Trace goes to the shared run store (store/postgres.py), keyed by the run;
- `upload_hosts`: each upload host process's slots and last heartbeat, so the line's capacity is the
  live upload hosts' slots plus `queue_size`.
These tables, like every table of the database, are made by its one owner, the Database
(store/database.py), which also names the advisory locks taken here.

A person's share and the line's capacity are checked and booked under one advisory lock
(Lock.QUEUE), so two web processes never both admit the run that fills them. A stop of a
waiting run takes it out of the line at once (its Procrastinate job cancelled, its Trace says
so); a running one is aborted: Procrastinate tells its upload host (LISTEN/NOTIFY), which kills
the run's process group and stores what it recorded, within seconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from contextlib import contextmanager
from datetime import UTC, datetime

from app.format import Trace, error_record, new_document
from app.format.notebook import annotate
from app.web.settings import default_of
from app.web.store.common import StoreUnavailable
from app.web.store.database import CONNECT_S, RECONNECT_S, Lock, lock
from app.web.store.postgres import PostgresRunStore

from .gate import Busy
from .queue import RunEnded, Submission, UnknownRun
from .run_book import TooMany

__all__ = ["NoUploadHost", "SharedQueue", "TASK", "QUEUE", "end_without_trace", "procrastinate_app",
           "prepare_schema"]

log = logging.getLogger(__name__)

TASK = "autograd_lab.run_upload"
QUEUE = "uploads"
HOST_SEEN_S = 30  # an upload host process not heard from for this long has no slots
# a result's wait asks the table first after 10 ms, then half as often again each time, up to
# every 0.25 s: a small run is done in a few tens of ms, a long one costs a question 4 times a
# second (a LISTEN for runs' ends would save those: docs/SCALING.md)
POLL_S = (0.01, 0.25)

def procrastinate_app(url: str | None = None, *, sync: bool = True):
    """The Procrastinate app both sides use: the web's with a sync connector (opened on the
    store's pool), an upload host's async. The task is named, not imported, on the web side."""
    import procrastinate

    # an upload host's own pool: given up and made again as soon as the store's (RECONNECT_S),
    # not after psycopg_pool's back-off of a minute and more (issue 39)
    connector = procrastinate.SyncPsycopgConnector() if sync else \
        procrastinate.PsycopgConnector(conninfo=url, reconnect_timeout=RECONNECT_S,
                                       kwargs={"connect_timeout": CONNECT_S})
    return procrastinate.App(connector=connector)


def prepare_schema(store: PostgresRunStore) -> None:
    """Our tables (the Database's, made when it opens) and Procrastinate's, made once whoever
    starts first (web or worker)."""
    store.open()
    store.database.procrastinate_schema()


def end_without_trace(store: PostgresRunStore, db, run_id: str, submission: tuple,
                      state: str, kind: str, message: str) -> None:
    """End a run that left no Trace of its own (stopped before it started, its upload host lost):
    its script (`submission`: name, source, device, notebook) stored with an error record
    that says why, and its row closed in `db`'s transaction."""
    name, source, device, notebook = submission
    doc = new_document(name, source, device, None)
    doc["error"] = error_record(kind, message)
    annotate(doc, json.loads(notebook) if notebook else None)
    kept = store.keep(doc, run_id)
    db.execute("UPDATE uploads SET state = %s, ended = now(), kept_whole = %s, events = 0, "
               "error_type = %s, detail = %s WHERE id = %s",
               (state, kept, kind, message if state == "failed" else None, run_id))


def _lock(client: str) -> str:
    """A person's Procrastinate lock: one of their runs running at a time."""
    return f"person:{client}"


def _now() -> datetime:
    return datetime.now(UTC)


class NoUploadHost(Exception):
    """No upload host has been heard from lately (HOST_SEEN_S): a run sent now would wait for
    ever, unless the operator chose that it waits (wait_for_upload_hosts). 503."""


def _live_hosts(db) -> list[tuple[str, int, float]]:
    """(name, slots, seconds since heard from) of each upload host heard from lately."""
    return db.execute(
        "SELECT name, slots, EXTRACT(EPOCH FROM now() - seen)::float FROM upload_hosts "
        "WHERE seen > now() - make_interval(secs => %s) ORDER BY name",
        (HOST_SEEN_S,)).fetchall()


class SharedQueue:
    """`RunQueue` over PostgreSQL and Procrastinate; the runs happen in upload host processes."""

    def __init__(self, store: PostgresRunStore, running: int, queued: int,
                 queue_size: int = default_of("queue_size"),
                 people_per_address: int = default_of("per_address_people"),
                 people_at=None,
                 wait_for_upload_hosts: bool = default_of("wait_for_upload_hosts")) -> None:
        self.store = store
        self.wait_for_upload_hosts = wait_for_upload_hosts
        self.per_client = (running, queued)
        self.queue_size = queue_size
        self.people_per_address = people_per_address
        self.people_at = people_at
        self._jobs = None  # the Procrastinate app, opened on the store's pool at first use

    def _procrastinate(self):
        if self._jobs is None:
            prepare_schema(self.store)
            self._jobs = procrastinate_app().open(self.store.database.pool)
        return self._jobs

    @contextmanager
    def _line(self):
        """Procrastinate's calls: its connection errors are the store's (503, Retry-After)."""
        from procrastinate.exceptions import ConnectorException

        try:
            yield self._procrastinate()
        except ConnectorException as exc:
            log.warning("the line (Procrastinate) cannot be reached: %s", exc.__cause__)
            self.store.database.outage.suspect()  # a probe says whether the database is away
            raise StoreUnavailable("the line of runs (the server's database) cannot be "
                                   "reached just now: try again in a minute") from exc

    def close(self) -> None:
        if self._jobs is not None:
            self._jobs.close()

    # ---- sending --------------------------------------------------------------------------

    def submit(self, run: Submission) -> str:
        with self._line():
            pass  # the line's tables made, once
        run_id = self.store.new_id()
        people = self._people(run.address) if run.address else self.people_per_address
        running, queued = self.per_client
        with self.store.database.transaction() as db:
            lock(db, Lock.QUEUE)
            mine, there, booked = db.execute(
                "SELECT COUNT(*) FILTER (WHERE client = %s), "
                "COUNT(*) FILTER (WHERE address = %s AND address <> ''), COUNT(*) "
                "FROM uploads WHERE state IN ('queued', 'running')",
                (run.client, run.address)).fetchone()
            if mine >= running + queued:
                raise TooMany(f"you have {mine} runs running or waiting, as many as one person "
                              "may: wait for one to finish, or stop one")
            if run.address and there >= (running + queued) * people:
                raise TooMany(f"this network address has {there} runs running or waiting, as "
                              f"many as {people} people may: wait for one to finish")
            slots = db.execute("SELECT COALESCE(SUM(slots), 0) FROM upload_hosts WHERE "
                               "seen > now() - make_interval(secs => %s)",
                               (HOST_SEEN_S,)).fetchone()[0]
            if slots == 0 and not self.wait_for_upload_hosts:
                raise NoUploadHost(
                    "no upload host is running, so nothing would run this: it would wait in "
                    "line for one that may never come. Ask whoever runs this server to start "
                    "`autograd-lab upload-host` (their /healthz says which are live), then "
                    "send it again; the scenarios still run")
            if booked >= slots + self.queue_size:
                place = booked - slots + 1  # where it would have waited
                raise Busy(f"the line is full: {booked} runs are running or waiting for "
                           f"{slots} upload host slot(s) and {self.queue_size} place(s) in line; "
                           f"this one would have been number {place} in line. Try again in a "
                           "few seconds", place=place)
            db.execute(
                "INSERT INTO uploads (id, client, address, name, source, device, time_limit, "
                "notebook, state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'queued')",
                (run_id, run.client, run.address, run.name, run.source, run.device, run.limit,
                 json.dumps(run.notebook) if run.notebook is not None else None))
        try:
            with self._line() as line:
                # its job's id is written by the upload host that claims it (upload_host.py):
                # one transaction less for every run sent
                line.configure_task(TASK, queue=QUEUE, lock=_lock(run.client)) \
                    .defer(run_id=run_id)
        except Exception:
            self._end_unstarted(run_id, "failed", "ServerError",
                                "The server could not queue this run: run it again in a minute.")
            raise
        return run_id

    def _people(self, address: str) -> int:
        more = self.people_at(address) if self.people_at is not None else 0
        return max(self.people_per_address, more)

    # ---- asking -----------------------------------------------------------------------------

    def _row(self, run_id: str) -> dict | None:
        with self.store.database.transaction() as db:
            cur = db.execute(
                "SELECT u.state, u.client, u.time_limit, u.created, u.started, u.ended, "
                "u.events, u.error_type, u.detail, u.kept_whole, u.job_id, "
                "(SELECT COUNT(*) FROM uploads o WHERE o.state = 'queued' AND o.seq <= u.seq), "
                "(SELECT COUNT(*) FROM uploads WHERE state = 'queued'), "
                "(SELECT COUNT(*) FROM uploads WHERE state = 'running'), now(), "
                "(SELECT COUNT(*) FROM upload_hosts WHERE seen > now() - make_interval(secs "
                "=> %s)) FROM uploads u WHERE u.id = %s", (HOST_SEEN_S, run_id))
            row = cur.fetchone()
            if row is None:
                return None
            names = [c.name for c in cur.description]
        return dict(zip(names[:11] + ["place", "waiting", "running", "now", "hosts"], row,
                        strict=True))

    def status(self, run_id: str) -> dict | None:
        row = self._row(run_id)
        if row is None:
            return None
        now, created, started, ended = row["now"], row["created"], row["started"], row["ended"]
        status = {"id": run_id, "state": row["state"],
                  "place": row["place"] if row["state"] == "queued" else None,
                  "waiting": row["waiting"], "running": row["running"],
                  "limit_s": row["time_limit"],
                  "waited_s": round(((started or ended or now) - created).total_seconds(), 1),
                  "elapsed_s": round(((ended or now) - started).total_seconds(), 1)
                  if started else 0.0, "link": f"/runs/{run_id}"}
        if row["state"] == "failed":
            status["detail"] = row["detail"] or "the run could not be started"
        if row["state"] == "queued" and row["hosts"] == 0:
            status["detail"] = ("no upload host is running now: this run starts when one does "
                                "(whoever runs this server can start `autograd-lab "
                                "upload-host`)")
        if row["state"] in ("done", "stopped", "failed") and row["kept_whole"] is not None:
            if row["kept_whole"]:
                status["events"], status["error_type"] = row["events"], row["error_type"]
            else:
                status["events"], status["error_type"] = 0, "TraceTooLarge"
        return status

    def line(self) -> dict:
        with self.store.database.transaction() as db:
            hosts = _live_hosts(db)
            running, waiting, oldest = db.execute(
                "SELECT COUNT(*) FILTER (WHERE state = 'running'), "
                "COUNT(*) FILTER (WHERE state = 'queued'), "
                "EXTRACT(EPOCH FROM now() - MIN(created) FILTER (WHERE state = 'queued'))::float "
                "FROM uploads WHERE state IN ('queued', 'running')").fetchone()
        report = {"takers": "upload hosts (autograd-lab upload-host), through the database",
                  "slots": sum(slots for _, slots, _ in hosts), "running": running,
                  "waiting": waiting,
                  "oldest_wait_s": round(oldest, 1) if oldest is not None else None,
                  "upload_hosts": [{"name": name, "slots": slots, "seen_s_ago": round(ago, 1)}
                                   for name, slots, ago in hosts]}
        if not hosts:
            report["detail"] = (
                "no upload host has been heard from in the last "
                f"{HOST_SEEN_S} s: uploads are " + ("accepted and wait for one"
                                                    if self.wait_for_upload_hosts else
                                                    "refused (503) until one starts"))
        return report

    def latest(self, limit: int) -> list[dict]:
        with self.store.database.transaction() as db:
            rows = db.execute("SELECT id, client, address, name, state, "
                              "EXTRACT(EPOCH FROM now() - created)::float FROM uploads "
                              "ORDER BY seq DESC LIMIT %s", (limit,)).fetchall()
        return [{"id": i, "client": c, "address": a, "name": n, "state": s,
                 "age_s": round(age, 1)} for i, c, a, n, s, age in rows]

    def owner(self, run_id: str) -> str | None:
        with self.store.database.transaction() as db:
            row = db.execute("SELECT client FROM uploads WHERE id = %s", (run_id,)).fetchone()
        return None if row is None else row[0]

    def started_by(self, run_id: str) -> str | None:
        return self.owner(run_id)  # the row says whose it is while the run is kept

    def recent(self, run_id: str) -> Trace | None:
        return None  # this process never held it: the store is asked

    async def result(self, run_id: str) -> Trace:
        pause = POLL_S[0]
        while True:
            row = await asyncio.to_thread(self._row, run_id)
            if row is None:
                raise UnknownRun(run_id)
            if row["state"] not in ("queued", "running") and row["kept_whole"] is not None:
                doc = await asyncio.to_thread(self.store.get, run_id)
                if doc is None:
                    raise UnknownRun(run_id)  # stored, then pushed out by the store's bound
                return doc
            await asyncio.sleep(pause)
            pause = min(POLL_S[1], pause * 1.5)

    # ---- stopping ---------------------------------------------------------------------------

    def cancel(self, run_id: str, wait: float = 10.0) -> dict:
        row = self._row(run_id)
        if row is None:
            raise UnknownRun(run_id)
        if row["state"] not in ("queued", "running"):
            raise RunEnded(run_id, row["state"])
        if self._end_unstarted(run_id, "stopped", "Stopped",
                               "The run was stopped on request before it started."):
            with self._line() as line:  # its job, not claimed: found among its person's
                for job in line.job_manager.list_jobs(lock=_lock(row["client"]),
                                                      status="todo"):
                    if job.task_kwargs.get("run_id") == run_id:
                        line.job_manager.cancel_job_by_id(job.id, abort=False)
            return self.status(run_id)
        # running on some upload host: Procrastinate tells it to abort; it kills the run and
        # stores what the run recorded. Its job is read again: an upload host that took the
        # run since the first read (which then still said queued, with no job) wrote it, and
        # without it the stop was lost and the run went on to its limit
        job_id = row["job_id"]
        if job_id is None:
            again = self._row(run_id)
            job_id = None if again is None else again["job_id"]
        if job_id is not None:
            with self._line() as line:
                line.job_manager.cancel_job_by_id(job_id, abort=True)
        ends = time.monotonic() + wait
        while time.monotonic() < ends:
            status = self.status(run_id)
            if status["state"] not in ("queued", "running"):
                return status
            time.sleep(0.05)
        return self.status(run_id)

    def _end_unstarted(self, run_id: str, state: str, kind: str, message: str) -> bool:
        """End a run no upload host has started: its Trace (the script and why) stored, its row
        closed. False if an upload host took it first."""
        with self.store.database.transaction() as db:
            row = db.execute("SELECT name, source, device, notebook FROM uploads "
                             "WHERE id = %s AND state = 'queued' FOR UPDATE",
                             (run_id,)).fetchone()
            if row is None:
                return False
            end_without_trace(self.store, db, run_id, row, state, kind, message)
        return True
