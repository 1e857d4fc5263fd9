"""`InProcessQueue`: the `RunQueue` (queue.py) of one machine. Runs wait in this process's run
book and gates and run in its upload lane; each run's Trace is stored before it is handed out."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from app.format import Trace, error_record, new_document
from app.format.notebook import annotate
from app.lru import LRU
from app.runner import NoFreeUid
from app.web.metrics import RunMeter, outcome_of
from app.web.settings import default_of
from app.web.store.sqlite import RunStore

from .gate import Stopped
from .queue import RUNS_REMEMBERED, RunEnded, Submission, UnknownRun
from .run_book import BookedRun, PeopleAt, RunBook
from .trace_service import DeviceError, Lane

__all__ = ["InProcessQueue"]

log = logging.getLogger(__name__)


class InProcessQueue:
    """Runs in this process's upload lane: a thread per booked run (the book bounds how many),
    its person's gate, then the lane's gate, then a worker from the lane."""

    def __init__(self, lane: Lane, store: RunStore, running: int, queued: int,
                 people_per_address: int = default_of("per_address_people"),
                 people_at: PeopleAt | None = None,
                 stored: Callable[[str, dict, str, str], None] | None = None,
                 meter: RunMeter | None = None) -> None:
        self.lane, self.store = lane, store
        self.meter = meter or RunMeter("upload")  # each run that ended, for the metrics
        # called with (run id, Trace, its person's client key and address) once its Trace is stored
        # whole and its waiters have heard: app.py prepares the run page's first look
        # (first_look.py)
        self.stored = stored
        # people_at: how many people an address stands for when a class says its room shares
        # one (app.py hands in the classroom's count; the book knows no classes)
        self.book = RunBook(running, queued, lane.gate, people_per_address, people_at)
        self._lock = threading.Lock()
        # run id -> requests awaiting its result, each on its own event loop
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future]]] = {}
        self._started_by: LRU[str] = LRU(RUNS_REMEMBERED)  # run id -> whose it is

    def submit(self, run: Submission) -> str:
        job = BookedRun(self.store.new_id(), run.client, run.name, run.limit, address=run.address)
        self.book.open(job)
        self._started_by.put(job.id, run.client)
        # a thread of its own, not one of the server's request threads: a run waiting in line
        # must not keep pages and Stop from being answered
        threading.Thread(target=self._run, args=(job, run), daemon=True,
                         name=f"autograd-lab-run-{job.id}").start()
        return job.id

    def _run(self, job: BookedRun, run: Submission) -> None:
        """Run, store, and close the job whatever happens (its error goes to `result`)."""
        outcome = "done"
        try:
            try:
                with self.book.slot(job):
                    doc = self.lane.run(run.source, run.name, [], run.device,
                                        started=job.attach, cancel=job.stop_event)
            except Stopped:  # stopped while it waited: the script is kept, with what happened
                outcome = "stopped"
                doc = new_document(run.name, run.source, run.device, None)
                doc["error"] = error_record("Stopped", "The run was stopped on request before "
                                            "it started.")
            except DeviceError:
                raise  # the person asked for a device this machine lacks: the error handler's 422
            except Exception as exc:  # noqa: BLE001 - the server failed, not the script
                outcome = "failed"
                doc = new_document(run.name, run.source, run.device, None)
                doc["error"] = error_record("ServerBusy" if isinstance(exc, NoFreeUid)
                                            else "ServerError", _not_started(exc))
            else:
                if doc.get("error") and doc["error"]["type"] == "Stopped":
                    outcome = "stopped"
            annotate(doc, run.notebook)  # the server's word on the cells, not the worker's
            job.kept_whole = self.store.keep(doc, job.id, owner=job.client,
                                            address=job.address)
            job.result = doc
        except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the result
            outcome = "failed"
            job.error = exc
        finally:
            self.book.close(job, outcome)
            self._meter(job, outcome)
            with self._lock:
                waiters = self._waiters.pop(job.id, [])
            for loop, future in waiters:
                try:
                    loop.call_soon_threadsafe(_settle, future)
                except RuntimeError:  # its loop has closed (the server stopped): nobody waits
                    pass
        # after the status says done: a first look may wait on the drawings' gate and on
        # graphviz, and a run must not seem to be running (nor count against anyone) meanwhile
        self._first_look(job)

    def _meter(self, job: BookedRun, state: str) -> None:
        """The ended run, told to the metrics: its outcome from its Trace (a run whose Trace
        could not be made or kept: ServerError), its wait and its time in a worker (a run
        stopped in line waited, and never ran)."""
        if job.result is not None:
            outcome = outcome_of(job.result, stopped=state == "stopped")
        else:  # no Trace: a device this machine lacks (the person's), else the server's fault
            outcome = "DeviceUnavailable" if isinstance(job.error, DeviceError) else "ServerError"
        end = job.finished if job.finished is not None else job.created
        waited = (job.started if job.started is not None else end) - job.created
        ran = end - job.started if job.started is not None else None
        self.meter.ran(outcome, waited, ran)

    def _first_look(self, job: BookedRun) -> None:
        if self.stored is not None and job.kept_whole and job.result is not None:
            try:
                self.stored(job.id, job.result, job.client, job.address)
            except Exception:  # noqa: BLE001 - the run is done and stored; this was extra
                log.exception("after storing run %s", job.id)

    def _job(self, run_id: str) -> BookedRun:
        job = self.book.get(run_id)
        if job is None:
            raise UnknownRun(run_id)
        return job

    def status(self, run_id: str) -> dict | None:
        job = self.book.get(run_id)
        if job is None:
            return None
        status = self.book.status(job)
        if job.state == "failed":
            kept = (job.result or {}).get("error") or {}  # the server failed; the script is kept
            status["detail"] = kept.get("message") or str(job.error or "") or \
                "the run could not be started"
        if job.result is not None and job.done.is_set():
            if job.kept_whole:
                error = job.result.get("error")
                status["events"] = len(job.result.get("events") or ())
                status["error_type"] = error.get("type") if isinstance(error, dict) else None
            else:  # the store kept its script only, with an error that says why
                status["events"], status["error_type"] = 0, "TraceTooLarge"
        return status

    def owner(self, run_id: str) -> str | None:
        job = self.book.get(run_id)
        return None if job is None else job.client

    def started_by(self, run_id: str) -> str | None:
        return self._started_by.get(run_id)

    def cancel(self, run_id: str, wait: float = 10.0) -> dict:
        job = self._job(run_id)
        if job.state not in ("queued", "running"):
            raise RunEnded(run_id, job.state)
        job.stop()
        job.done.wait(wait)  # a waiting run leaves the line at once, a running one in seconds
        return self.book.status(job)

    def close(self) -> None:
        """Nothing to let go of: the lane is the TraceService's to stop."""

    def line(self) -> dict:
        return {"takers": "this process's upload lane", **self.book.line()}

    def latest(self, limit: int) -> list[dict]:
        now, wall = time.monotonic(), time.time()
        runs = {j.id: {"id": j.id, "client": j.client, "address": j.address, "name": j.name,
                       "state": j.state, "age_s": round(now - j.created, 1)}
                for j in self.book.jobs()}
        for row in self.store.owned(limit):  # older ones: only the store knows them now
            runs.setdefault(row["id"], {"id": row["id"], "client": row["owner"],
                                        "address": row["address"], "name": row["name"],
                                        "state": "stored",
                                        "age_s": round(max(0.0, wall - row["created"]), 1)})
        return sorted(runs.values(), key=lambda r: r["age_s"])[:limit]

    def recent(self, run_id: str) -> Trace | None:
        job = self.book.get(run_id)
        if job is None or not job.done.is_set() or not job.kept_whole:
            return None
        return job.result

    async def result(self, run_id: str) -> Trace:
        job = self._job(run_id)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:  # `_run` sets `done` before it takes this lock to wake the waiters
            if not job.done.is_set():
                self._waiters.setdefault(run_id, []).append((loop, future))
            else:
                future.set_result(None)
        try:
            await future
        finally:
            if not future.done() or future.cancelled():  # the request went away, or waited
                with self._lock:   # its time (a status ?wait=): not kept until the run ends
                    waiting = self._waiters.get(run_id)
                    if waiting is not None and (loop, future) in waiting:
                        waiting.remove((loop, future))
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result


def _not_started(exc: Exception) -> str:
    """What a person is told when the server could not start their run (their script is kept
    with it). The exception's own words go to the log: they may name the server's paths."""
    if isinstance(exc, NoFreeUid):
        return (f"The server could not start a sandbox for this run: {exc}. It is at its limit "
                "for the moment; run the script again in a minute.")
    log.error("a run could not be started", exc_info=exc)
    return ("The server could not start this run (its log says why). The script is kept: run "
            "it again, and if this keeps happening, tell whoever runs the server.")


def _settle(future: asyncio.Future) -> None:
    if not future.done():  # else the request went away and its wait was cancelled
        future.set_result(None)
