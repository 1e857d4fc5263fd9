"""Whether the shared mode's PostgreSQL is known to be away (`Outage`, a circuit breaker), so
that while it is, every question to it is refused at once instead of each waiting for the
pool's timeout: a web process's class routes run on its event loop, and six answers each
waiting 3 s for a connection held every other page of that process for 15 s (issue 39).

A failed connection (`suspect`) marks the database down at once (`down`: the Database refuses
transactions with StoreUnavailable without asking the pool; the requests that came with the
failure must not each wait 3 s for a connection) and starts a probe, one thread: it connects
by hand (libpq's own connect, no pool), every PROBE_S until it can; then `on_return` runs (the
Database makes its pool whole again) and the database is up. A failure that was one
connection's, or a pool busy for a moment, is down for the first probe's few milliseconds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["Outage", "PROBE_S", "PROBE_CONNECT_S"]

log = logging.getLogger(__name__)

PROBE_S = 0.5  # how soon after the database's return its first question goes through
PROBE_CONNECT_S = 2  # libpq's connect_timeout for a probe: a host that drops packets


class Outage:
    def __init__(self, url: str, on_return: Callable[[], None] = lambda: None,
                 probe_s: float = PROBE_S) -> None:
        self.url = url
        self.on_return = on_return
        self.probe_s = probe_s
        self._since: float | None = None  # monotonic time it was found down
        self._lock = threading.Lock()
        self._probing = False

    @property
    def down(self) -> bool:
        return self._since is not None

    def seconds_down(self) -> float:
        since = self._since
        return 0.0 if since is None else time.monotonic() - since

    def suspect(self) -> None:
        """A connection failed: the database is down until a probe (a thread) connects, unless
        a probe is under way. Returns at once."""
        with self._lock:
            if self._probing:
                return
            self._probing = True
            self._since = time.monotonic()
        threading.Thread(target=self._probe, name="autograd-lab-db-probe", daemon=True).start()

    def _reachable(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url, connect_timeout=PROBE_CONNECT_S).close()
        except psycopg.Error:
            return False
        return True

    def _probe(self) -> None:
        try:
            if not self._reachable():
                log.warning("the database cannot be reached: its questions are refused at "
                            "once until it answers again (asked every %.1f s)", self.probe_s)
                while not self._reachable():
                    time.sleep(self.probe_s)
                log.warning("the database answers again after %.1f s", self.seconds_down())
            try:
                self.on_return()
            except Exception:  # noqa: BLE001 - the pool mends itself too, only slower
                log.warning("the database is back, but its pool could not be renewed",
                            exc_info=True)
        finally:
            with self._lock:
                self._since = None
                self._probing = False
