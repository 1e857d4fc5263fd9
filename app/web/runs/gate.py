"""How many runs go at once (one per core by default), and how many may wait, in order.

A request that would wait behind a full queue is turned away at once (Busy: 503 with
Retry-After, http/error_handler.py) rather than piling up: the server keeps answering everyone
else. Those that wait are served first come, first served, each knows its place in line, and one
that is stopped while it waits leaves the line at once (Stopped).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import contextmanager

__all__ = ["Gate", "Busy", "Stopped"]


class Busy(Exception):
    """Every worker is busy and the queue is full. `place`: where in line the run would have
    been, where the queue knows (the answer carries it)."""

    def __init__(self, message: str = "every worker is busy and the queue is full: try again in "
                                      "a few seconds", place: int | None = None) -> None:
        super().__init__(message)
        self.place = place


class Stopped(Exception):
    """The run was stopped before it started."""


class Gate:
    def __init__(self, workers: int, queue: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self._cond = threading.Condition()
        self._running = 0
        self._line: deque[object] = deque()  # waiting, first in line first

    @contextmanager
    def enter(self, place: Callable[[object], None] | None = None,
              stopped: threading.Event | None = None):
        """Wait for a slot and hold it for the block. `place(ticket)` hands the caller its
        ticket for `position`; setting `stopped` while it waits raises Stopped."""
        ticket = object()
        with self._cond:
            if self._running + len(self._line) >= self.capacity:
                raise Busy()
            self._line.append(ticket)
            if place is not None:
                place(ticket)
            try:
                while self._running >= self.workers or self._line[0] is not ticket:
                    if stopped is not None and stopped.is_set():
                        raise Stopped()
                    self._cond.wait(0.1 if stopped is not None else None)
            except BaseException:
                self._line.remove(ticket)
                self._cond.notify_all()
                raise
            self._line.popleft()
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def resize(self, workers: int) -> None:
        """Let `workers` runs go at once from now on (the queue keeps its length); runs past
        the new number finish, and no new one starts until the count is below it."""
        with self._cond:
            self.capacity += workers - self.workers
            self.workers = workers
            self._cond.notify_all()

    def position(self, ticket: object) -> int | None:
        """1 for the next to go, 2 for the one after...; None once it runs (or never waited)."""
        with self._cond:
            for i, waiting in enumerate(self._line):
                if waiting is ticket:
                    return i + 1
        return None

    def load(self) -> tuple[int, int]:
        """(running, waiting)."""
        with self._cond:
            return self._running, len(self._line)
