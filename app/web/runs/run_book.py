"""Runs of people's code from the moment they are sent until they are stored: whose each one
is, its place in line, how long it has run, its limit, and a way to stop it.

Every upload goes through two gates: its person's (at most `per_client_running` running and
`per_client_queued` waiting: past that, TooMany, 429) and then the server's (the upload
workers, first come first served). A stop ends a waiting run at once (it leaves the line) and a
running one within a second or two (its worker and everything it started are killed).

Used by the in-process queue (in_process_queue.py), and only there: the rest of the app asks the
queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.web.settings import default_of

from .gate import Busy, Gate

if TYPE_CHECKING:
    from app.runner.child import Child

__all__ = ["BookedRun", "RunBook", "PeopleAt", "TooMany"]

# how many people an address stands for, beyond the server's setting: the classroom's count of
# members behind one address (Classroom.people_at), handed in so that jobs know no classes
PeopleAt = Callable[[str], int]


class TooMany(Exception):
    """This person already has as many runs running and waiting as one may (429)."""


@dataclass
class BookedRun:
    """One run in the book, from the moment it is sent until it is stored: whose it is, its
    state, its limit, a way to stop it. (Not the runner's `Job`, the line a worker is sent.)"""
    id: str
    client: str
    name: str
    limit: float
    address: str = ""  # where it was sent from: bounded per address too (cookies are free)
    created: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    state: str = "queued"  # queued, running, done, stopped, failed (refused: 429, 503)
    error: BaseException | None = None
    result: dict | None = None  # its Trace, once stored
    kept_whole: bool = False  # the store kept `result` as it is (not cut to its script)
    stop_event: threading.Event = field(default_factory=threading.Event)
    ticket: object | None = None   # its place in the server's line
    child: Child | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def attach(self, child: Child) -> None:
        """Its worker, once it has one (a stop that came first ends it at once)."""
        self.child = child
        if self.stop_event.is_set():
            child.stop()

    def stop(self) -> None:
        self.stop_event.set()
        if self.child is not None:
            self.child.stop()


class RunBook:
    def __init__(self, running: int, queued: int, gate: Gate,
                 people_per_address: int = default_of("per_address_people"),
                 people_at: PeopleAt | None = None) -> None:
        self.per_client = (running, queued)
        self.people_per_address = people_per_address
        self.people_at = people_at
        self.gate = gate  # the server's upload workers
        self._lock = threading.Lock()
        self._jobs: dict[str, BookedRun] = {}
        # client -> [its gate, jobs holding it]: deleted only when nobody holds it any more
        self._client_gates: dict[str, list] = {}

    def open(self, job: BookedRun) -> None:
        """Book the job; TooMany or Busy at once when its person's share or the line is full
        (checked again when it takes its places: two at once may still find it full then)."""
        # asked before the lock is taken: the classroom's count is not this book's to hold up
        people = self.people(job.address) if job.address else self.people_per_address
        with self._lock:
            running, queued = self.per_client
            # the person's booked runs, not only those already at their gate: two sent at once
            # must not both pass before either thread has reached it
            mine = sum(1 for j in self._jobs.values()
                       if j.client == job.client and j.finished is None)
            if mine >= running + queued:
                raise _too_many(self.per_client)
            # a fresh cookie is one page load away: one address stands for a few people at most
            if job.address:
                from_there = sum(1 for j in self._jobs.values()
                                 if j.address == job.address and j.finished is None)
                if from_there >= (running + queued) * people:
                    raise TooMany(
                        f"this network address has {from_there} runs running or waiting, as "
                        f"many as {people} people may: wait for one to finish; if your class "
                        "shares one network address, ask the teacher to switch on \u201cThis "
                        "room shares one network address\u201d in the class (then every student "
                        "who joined it counts), or to start the server with "
                        "AUTOGRAD_LAB_PER_ADDRESS_PEOPLE set to the class's size")
            # every booked job counts, waiting in its person's line or the server's: a thread
            # each, so the total is bounded whatever the cookies say
            booked = sum(1 for j in self._jobs.values() if j.finished is None)
            if booked >= self.gate.capacity:
                raise Busy()
            self._jobs[job.id] = job

    def people(self, address: str) -> int:
        """How many people `address` stands for: the setting, or more if `people_at` says so
        (a class whose room shares one address counts its members there)."""
        more = self.people_at(address) if self.people_at is not None else 0
        return max(self.people_per_address, more)

    def get(self, run_id: str) -> BookedRun | None:
        with self._lock:
            return self._jobs.get(run_id)

    def jobs(self) -> list[BookedRun]:
        """Every run in the book now: waiting, running, and those ended in the last minutes."""
        with self._lock:
            return list(self._jobs.values())

    def close(self, job: BookedRun, state: str) -> None:
        job.state, job.finished = state, time.monotonic()
        job.done.set()
        with self._lock:
            # kept a little while for its status; the run store has it from now on
            self._jobs = {k: j for k, j in self._jobs.items()
                          if j.finished is None or time.monotonic() - j.finished < 300}

    def slot(self, job: BookedRun):
        """The context in which the job may run: its person's gate, then the server's."""
        with self._lock:
            held = self._client_gates.setdefault(job.client, [Gate(*self.per_client), 0])
            held[1] += 1
        return _Slots(self, held[0], job)

    def _release(self, client: str) -> None:
        with self._lock:
            held = self._client_gates.get(client)
            if held is not None:
                held[1] -= 1
                if held[1] <= 0:
                    del self._client_gates[client]

    def line(self) -> dict:
        """The server's runs at once, running and waiting now, and the longest wait."""
        now = time.monotonic()
        with self._lock:
            waits = [now - j.created for j in self._jobs.values() if j.state == "queued"]
        running, waiting = self.gate.load()
        return {"slots": self.gate.workers, "running": running, "waiting": waiting,
                "oldest_wait_s": round(max(waits), 1) if waits else None}

    def status(self, job: BookedRun) -> dict:
        now = time.monotonic()
        place = self.gate.position(job.ticket) if job.state == "queued" and job.ticket else None
        running, waiting = self.gate.load()
        return {"id": job.id, "state": job.state, "place": place, "waiting": waiting,
                "running": running, "limit_s": job.limit,
                "waited_s": round((job.started or job.finished or now) - job.created, 1),
                "elapsed_s": round((job.finished or now) - job.started, 1)
                if job.started else 0.0, "link": f"/runs/{job.id}"}


class _Slots:
    def __init__(self, book: RunBook, gate: Gate, job: BookedRun) -> None:
        self.book, self.gate, self.job = book, gate, job
        self._stack: list = []

    def __enter__(self):
        job = self.job
        mine = self.gate.enter(stopped=job.stop_event)
        try:
            mine.__enter__()
        except Busy as exc:
            self.book._release(job.client)
            raise _too_many(self.book.per_client) from exc
        except BaseException:
            self.book._release(job.client)
            raise
        self._stack.append(mine)

        def place(ticket):
            job.ticket = ticket

        server = self.book.gate.enter(place=place, stopped=job.stop_event)
        try:
            server.__enter__()
        except BaseException:
            mine.__exit__(None, None, None)
            self._stack.clear()
            self.book._release(job.client)
            raise
        self._stack.append(server)
        job.state, job.started = "running", time.monotonic()
        return job

    def __exit__(self, *exc):
        while self._stack:
            self._stack.pop().__exit__(*exc)
        self.book._release(self.job.client)
        return False


def _too_many(per_client: tuple[int, int]) -> TooMany:
    running, queued = per_client
    return TooMany(f"you already have {running} run(s) running and {queued} waiting, as many as "
                   "one person may at once here: wait for one to finish, or stop one (the Stop "
                   "button, or DELETE /api/runs/ID)")
