"""Audit lines: one log line for each action that changes who may do what here (a class started
or ended, a member removed, a run stopped from the admin page) and each token refused, on the
logger `autograd_lab.audit`, with the request's id (http/request_ids.py).

Refusals are bounded (`refused`): a stranger can send wrong tokens as fast as the server
answers, and each was a line, so the log (and the disk under it) was theirs to fill. Per
address (client_keys.py's place), the first PER_ADDRESS in a WINDOW_S-second window are
written, the rest counted and said in one `token_refused_more` line once the window is over;
at most OVERALL addresses have windows at once, the others' refusals are counted together
(`address=others`). So at most OVERALL * PER_ADDRESS lines a window, and OVERALL addresses'
worth of memory. The bound is on addresses, not lines: counted in lines, 20 addresses sending 5
each hid every other address's refusals for a minute (an attacker's read, issue 38).
Actions are always written.

A line is `EVENT key=value ... request=ID`. Values come from requests (a path, an alias), so
each is cut to 200 characters and written as a JSON string where it holds anything but plain
characters: a newline in a path cannot start a line that looks like another action's."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from .http.request_ids import request_id

__all__ = ["RefusalLog", "audit", "install_audit_log", "refused"]

log = logging.getLogger("autograd_lab.audit")
_PLAIN = re.compile(r"[A-Za-z0-9_.:/@+-]{1,200}")


def audit(event: str, **fields: object) -> None:
    _write(event, fields, request_id() or "-")
    REFUSALS.sweep()  # a window that is over says what it held back, without waiting


def _write(event: str, fields: dict, request: str) -> None:
    parts = [event, *(f"{key}={_value(value)}" for key, value in fields.items()),
             f"request={request}"]
    log.info(" ".join(parts))


PER_ADDRESS = 5    # refusals written per address and window
WINDOW_S = 60.0
OVERALL = 100      # addresses tracked at once (each its own window), all together
OTHERS = "others"  # the address of the count of refusals past OVERALL


class RefusalLog:
    """Writes refusal lines, bounded per address and in all (module docstring); memory: at
    most `overall` addresses, each three numbers. Thread-safe; `clock` for tests."""

    def __init__(self, per_address: int = PER_ADDRESS, window_s: float = WINDOW_S,
                 overall: int = OVERALL, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_address, self.window_s, self.overall = per_address, window_s, overall
        self.clock = clock
        self._lock = threading.Lock()
        # address -> [window start, lines written, refusals held back], oldest window first
        self._windows: OrderedDict[str, list] = OrderedDict()
        self._others = [clock(), 0]  # [window start, refusals] of addresses past `overall`

    def refused(self, event: str, address: str, **fields: object) -> None:
        now = self.clock()
        with self._lock:
            summaries = self._close(now)
            window = self._windows.get(address)
            if window is None and len(self._windows) < self.overall:
                window = self._windows[address] = [now, 0, 0]
            write = window is not None and window[1] < self.per_address
            if write:
                window[1] += 1
            elif window is not None:
                window[2] += 1
            else:
                self._others[1] += 1
        for line in summaries:
            _write(*line)
        if write:
            _write(event, {**fields, "address": address}, request_id() or "-")

    def sweep(self) -> None:
        """Write the summaries of the windows that are over (an action, shutdown)."""
        with self._lock:
            summaries = self._close(self.clock())
        for line in summaries:
            _write(*line)

    def flush(self) -> None:
        """End every window now (the server stops): what was held back is said."""
        with self._lock:
            summaries = self._close(float("inf"))
        for line in summaries:
            _write(*line)

    def _close(self, now: float) -> list[tuple]:
        """Windows that are over: removed, and a line for each that held refusals back."""
        lines = []
        while self._windows:
            address, (start, _, more) = next(iter(self._windows.items()))
            if start + self.window_s > now:
                break
            del self._windows[address]
            if more:
                lines.append(self._summary(address, more))
        if self._others[0] + self.window_s <= now:
            if self._others[1]:
                lines.append(self._summary(OTHERS, self._others[1]))
            self._others = [now if now != float("inf") else self.clock(), 0]
        return lines

    def _summary(self, address: str, more: int) -> tuple:
        return ("token_refused_more", {"count": more, "address": address,
                                       "within_s": round(self.window_s)}, "-")


REFUSALS = RefusalLog()


def refused(event: str, address: str, **fields: object) -> None:
    """An audit line for a refusal, bounded per address (`RefusalLog`)."""
    REFUSALS.refused(event, address, **fields)


def _value(value: object) -> str:
    text = str(value)[:200]
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def install_audit_log() -> None:
    """Where nobody configured the audit logger, its lines go to standard error (uvicorn's
    own logging configures only uvicorn's loggers): an operator's configuration, if any, wins."""
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)  # a root logger at WARNING would drop every line
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s audit %(message)s"))
    log.addHandler(handler)
    log.propagate = False
