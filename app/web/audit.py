"""Audit lines: one log line for each action that changes who may do what here (a class started
or ended, a member removed, a run stopped from the admin page) and each token refused, on the
logger `autograd_lab.audit`, with the request's id (http/request_ids.py).

Refusals are bounded (`refused`): a stranger can send wrong tokens as fast as the server
answers, and each was a line, so the log (and the disk under it) was theirs to fill. Per
address (client_keys.py's place), the first PER_ADDRESS in a WINDOW_S-second window are
written, the rest counted and said in one `token_refused_more` line once the window is over;
at most OVERALL addresses have windows at once, the others' refusals are counted together
(`address=others`; http/address_windows.py counts). Actions are always written.

A line is `EVENT key=value ... request=ID`. Values come from requests (a path, an alias), so
each is cut to 200 characters and written as a JSON string where it holds anything but plain
characters: a newline in a path cannot start a line that looks like another action's."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable

from .http.address_windows import AddressWindows
from .http.own_logs import to_stderr_unless_configured
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


class RefusalLog:
    """Writes refusal lines, bounded per address and in all (module docstring; the counting is
    address_windows.py's). Thread-safe; `clock` for tests."""

    def __init__(self, per_address: int = PER_ADDRESS, window_s: float = WINDOW_S,
                 overall: int = OVERALL, clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = AddressWindows(per_address, window_s, overall, clock)

    def refused(self, event: str, address: str, **fields: object) -> None:
        write, over = self.windows.admit(address)
        self._say(over)
        if write:
            _write(event, {**fields, "address": address}, request_id() or "-")

    def sweep(self) -> None:
        """Write the counts of the windows that are over (an action, a timer)."""
        self._say(self.windows.close())

    def flush(self) -> None:
        """End every window now (the server stops): what was held back is said."""
        self._say(self.windows.close(everything=True))

    def _say(self, over: list[tuple[str, int]]) -> None:
        for address, held in over:
            _write("token_refused_more", {"count": held, "address": address,
                                          "within_s": round(self.windows.window_s)}, "-")


REFUSALS = RefusalLog()


def refused(event: str, address: str, **fields: object) -> None:
    """An audit line for a refusal, bounded per address (`RefusalLog`)."""
    REFUSALS.refused(event, address, **fields)


def _value(value: object) -> str:
    text = str(value)[:200]
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


def install_audit_log() -> None:
    to_stderr_unless_configured(log, "audit")
