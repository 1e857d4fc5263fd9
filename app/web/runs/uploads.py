"""People's own code, from the moment it is sent until its Trace is stored: the one place an
upload's life is told. The routes (routers/runs.py) parse a request, call this, and answer.

`UploadService` gives each run its limit, hands it to the queue (queue.py: its id, the
person's share, the line, a worker, the run store), waits for its result, and says its status
or stops it for whoever may. It knows the queue only as a `RunQueue`, so a queue on other
machines can take the in-process one's place without this or a route changing.
"""

from __future__ import annotations

import asyncio

from app.format import Trace
from app.web.errors import AppError
from app.web.store.common import run_link
from app.web.store.sqlite import RunStore

from .queue import RunEnded, RunQueue, Submission, UnknownRun

__all__ = ["UploadService"]


class UploadService:
    def __init__(self, queue: RunQueue, store: RunStore, limit: float) -> None:
        self.queue, self.store = queue, store
        self.limit = limit  # each run's wall-clock seconds

    def submit(self, client: str, name: str, source: str, device: str,
               address: str = "", notebook: dict | None = None) -> str:
        """Queue a run for `client` (sent from `address`); its id (TooMany: 429, Busy: 503).
        `notebook`: the script is that notebook's code cells (its `script.notebook`)."""
        return self.queue.submit(Submission(client, name, source, device, self.limit,
                                            address, notebook))

    async def result(self, run_id: str) -> Trace:
        """The run's Trace with its id and link, once it is stored (or the error that ended
        it); waits on the event loop, holding no thread."""
        try:
            doc = await self.queue.result(run_id)
        except UnknownRun:  # ended long ago: the store has it, if it was kept
            # parsed, in a thread (not on the event loop): the caller is handed a Trace, as
            # the queue hands it; rare (the queue forgot the run between submit and now)
            doc = await asyncio.to_thread(self.store.get, run_id)
            if doc is None:
                raise AppError(404, f"no run {run_id!r}") from None
        return {**doc, "run": run_link(run_id)}

    async def settled(self, run_id: str, timeout: float) -> None:
        """Wait until the run ends or `timeout` s have passed (a status request that waits:
        the page asks once a second instead of every 0.4 s, and hears of the end at once)."""
        # (status takes the queue's thread locks: not on the event loop)
        if not await asyncio.to_thread(self.pending, run_id):
            return
        try:
            await asyncio.wait_for(self.queue.result(run_id), timeout)
        except Exception:  # noqa: BLE001 - timed out, or the run failed: its status says which
            pass

    def line(self) -> dict:
        """For /healthz: who takes uploads and how their line stands (RunQueue.line)."""
        return self.queue.line()

    def latest(self, limit: int) -> list[dict]:
        """The runs sent last, newest first (RunQueue.latest): the admin page's."""
        return self.queue.latest(limit)

    def recent(self, run_id: str) -> Trace | None:
        """The run's Trace while the queue still holds it parsed (see RunQueue.recent)."""
        return self.queue.recent(run_id)

    def pending(self, run_id: str) -> bool:
        """Whether the run is still waiting or running (its Trace is not stored yet)."""
        status = self.queue.status(run_id)
        return status is not None and status["state"] in ("queued", "running")

    def status(self, run_id: str) -> dict:
        """Where a run is: its state, place in line, how long it has waited and run, its
        limit; `done` for one only the store still knows."""
        status = self.queue.status(run_id)
        if status is not None:
            return status
        if not self.store.exists(run_id):
            raise AppError(404, f"no run {run_id!r}")
        return {"id": run_id, "state": "done", "link": f"/runs/{run_id}"}

    def started_by(self, run_id: str) -> str | None:
        """Whose run it is (RunQueue.started_by): only its starter may send it to a class."""
        return self.queue.started_by(run_id)

    def cancel(self, run_id: str, client: str, has_token: bool) -> dict:
        """Stop a waiting or running run, for the person who started it or whoever has the
        server's token; its status once it has ended (or after 10 s)."""
        owner = self.queue.owner(run_id)
        if owner is None:
            if self.store.exists(run_id):
                raise AppError(409, f"run {run_id!r} has finished: GET /api/runs/{run_id}")
            raise AppError(404, f"no run {run_id!r} is waiting or running here")
        if owner != client and not has_token:
            raise AppError(403, "only the person who started this run (or whoever has the "
                                "server's token) may stop it")
        try:
            return self.queue.cancel(run_id)
        except RunEnded as exc:
            raise AppError(409, str(exc)) from None
        except UnknownRun:  # ended and forgotten between the two questions
            raise AppError(409, f"run {run_id!r} has finished: GET /api/runs/{run_id}") from None
