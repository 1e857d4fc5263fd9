"""How many runs go at once (one per core by default), and how many may wait.

A request that would wait behind a full queue is turned away at once (Busy: 503 with
Retry-After, errors.py) rather than piling up: the server keeps answering everyone else.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

__all__ = ["Gate", "Busy"]


class Busy(Exception):
    """Every worker is busy and the queue is full."""

    def __init__(self, message: str = "every worker is busy and the queue is full: try again in "
                                      "a few seconds") -> None:
        super().__init__(message)


class Gate:
    def __init__(self, workers: int, queue: int) -> None:
        self._slots = threading.Semaphore(workers)
        self._lock = threading.Lock()
        self._capacity = workers + queue
        self._inside = 0  # running or waiting

    @contextmanager
    def enter(self):
        with self._lock:
            if self._inside >= self._capacity:
                raise Busy()
            self._inside += 1
        try:
            with self._slots:
                yield
        finally:
            with self._lock:
                self._inside -= 1
