"""Work asked for by several threads at once, done once (the run store's parses, the
drawings' renders): the first caller does it, the others wait for it and share the result."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["SingleFlight"]


class SingleFlight:
    """Work asked for by several threads at once is done once: the first does it, the others
    wait and share its result. Nothing is kept once it is handed out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, Flight] = {}

    def run(self, key: Hashable, work: Callable[[], Any], patience: float | None = None) -> Any:
        """`work`'s result, done once for all callers of `key` at a time; a caller that finds
        it under way waits at most `patience` seconds (TimeoutError), so that many asking for
        one slow thing do not each hold a thread for as long as it takes."""
        with self._lock:
            flight = self._running.get(key)
            leads = flight is None
            if leads:
                flight = self._running[key] = Flight()
        if not leads:
            return flight.outcome(patience)
        try:
            flight.value = work()
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._running[key]
            flight.done.set()
        return flight.value


class Flight:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def outcome(self, patience: float | None = None) -> Any:
        if not self.done.wait(patience):
            raise TimeoutError("still being worked out")
        if self.error is not None:
            raise self.error
        return self.value
