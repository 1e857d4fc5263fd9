"""The line uploads wait in, as an interface (`RunQueue`) and its one implementation today
(`InProcessQueue`, in_process_queue.py: the run book, the gates and the upload lane of this
process; `SharedQueue`, shared_queue.py: the line in PostgreSQL).

The upload service (uploads.py) and the routes above it know a queue only through `RunQueue`,
so a queue whose workers are on other machines (a job table in PostgreSQL) can take this one's
place without a route changing. Every implementation passes tests/web/runs/test_queue_contract.py.

What every implementation promises:
- `submit` books a run against its person's share and the server's line, or refuses at once:
  TooMany (429) past the person's share, Busy (503) when the line is full;
- `status` says where a run is (queued with its place in line, running, done, stopped, failed)
  while the queue knows it, None once only the run store does;
- `cancel` takes a waiting run out of the line at once and ends a running one within seconds;
- `result` waits (without holding a thread) for the run's Trace, stored in the run store
  before it is handed out; a stop before the start still gives a Trace that says so;
- a notebook's Trace carries its cell map and skipped lines (`annotate`, before it is stored).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.format import Trace

__all__ = ["RUNS_REMEMBERED", "RunEnded", "RunQueue", "Submission", "UnknownRun"]

RUNS_REMEMBERED = 10_000  # whose each run is, for at least this many (the store keeps 500)


@dataclass(frozen=True)
class Submission:
    """One upload as the queue takes it: everything a worker anywhere needs to run it."""
    client: str   # whose share it counts against
    name: str     # the script's file name in its run folder
    source: str
    device: str
    limit: float  # wall-clock seconds
    address: str = ""  # the connection's address: its runs are bounded too (RunBook.open)
    # an uploaded notebook's cell map and skipped lines, put in its Trace as it is stored
    # (app/format/notebook.py: annotate); None for a script
    notebook: dict | None = None


class UnknownRun(KeyError):
    """The queue does not know this run (never sent, or stored and forgotten)."""


class RunEnded(Exception):
    """The run has already ended, so there is nothing to stop."""

    def __init__(self, run_id: str, state: str) -> None:
        super().__init__(f"run {run_id!r} has already ended ({state})")
        self.state = state


class RunQueue(Protocol):
    def submit(self, run: Submission) -> str:
        """Book and queue the run (TooMany, Busy); its id (also its id in the run store). It
        runs in the background."""

    def status(self, run_id: str) -> dict | None:
        """{id, state, place, waiting, running, limit_s, waited_s, elapsed_s, link[, detail]
        [, events, error_type]}: the last two once its Trace is stored (how many events it
        recorded, its error's type or None), so that the page need not fetch a big Trace
        only to learn whether to show it or the script's error."""

    def owner(self, run_id: str) -> str | None:
        """Whose share the run counts against (the client key), while the queue knows it."""

    def started_by(self, run_id: str) -> str | None:
        """Whose run this was (the client key that sent it), also after it ended, for at
        least the last RUNS_REMEMBERED runs; None for one it never saw or has forgotten. Only
        a run's starter may send it to a class's teacher: the queue is the one place that
        knows whose a run is."""

    def cancel(self, run_id: str, wait: float = 10.0) -> dict:
        """Stop it and wait up to `wait` s for it to end; its status (UnknownRun, RunEnded)."""

    async def result(self, run_id: str) -> Trace:
        """Its stored Trace once it ends, or the exception that ended it (UnknownRun)."""

    def close(self) -> None:
        """Let go of what the queue holds open (the server is stopping)."""

    def line(self) -> dict:
        """For /healthz: who takes runs and how the line stands: {"takers": where runs run,
        "slots": runs that may run at once now, "running", "waiting", "oldest_wait_s" (the
        longest a waiting run has waited, or None), and "upload_hosts" in the shared mode}.
        Raises StoreUnavailable where the line is in a database that does not answer."""

    def latest(self, limit: int) -> list[dict]:
        """The admin page's runs (admin/people.py): the `limit` sent last, newest first, each
        {id, client (whose: its client key), address, name, state (queued, running, done,
        stopped, failed; "stored" for one only the run store still knows), age_s (seconds
        since it was sent)}."""

    def recent(self, run_id: str) -> Trace | None:
        """Its Trace as the store kept it, while this process still holds it parsed (a run
        that just ended); None otherwise: the store is asked. The page asks for its drawings
        right after the run ends: parsing a big model's Trace again took 0.1 s of that."""
