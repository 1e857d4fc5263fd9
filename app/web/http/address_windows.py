"""How many log lines each client address may have written in a window, and how many it had
held back: the bound a log needs when a stranger can make it write a line per request.

Per address, the first `per_address` lines in a `window_s`-second window are written and the
rest counted; once the window is over its count is handed back to be said in one line. At most
`overall` addresses have windows at once; lines from the others are counted together (address
`others`). So a window writes at most `overall * per_address` lines, and memory holds at most
`overall` addresses. The bound is on addresses, not lines: counted in lines, 20 addresses
sending 5 each hid every other address's lines for a minute (an attacker's read, issue 38).

Used by the audit log's refusals (audit.py) and the access log (access_log.py)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["OTHERS", "AddressWindows"]

OTHERS = "others"  # the address of the count of lines past `overall` addresses


class AddressWindows:
    """Thread-safe; `clock` for tests. `admit(address)` says whether to write a line;
    `close()` hands back (address, held back) for each window that is over."""

    def __init__(self, per_address: int, window_s: float, overall: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.per_address, self.window_s, self.overall = per_address, window_s, overall
        self.clock = clock
        self._lock = threading.Lock()
        # address -> [window start, lines written, lines held back], oldest window first
        self._windows: OrderedDict[str, list] = OrderedDict()
        self._others = [clock(), 0]  # [window start, lines] of addresses past `overall`

    def admit(self, address: str) -> tuple[bool, list[tuple[str, int]]]:
        """(whether this address's line is written, the windows over by now)."""
        now = self.clock()
        with self._lock:
            over = self._close(now)
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
        return write, over

    def close(self, everything: bool = False) -> list[tuple[str, int]]:
        """The windows that are over (`everything`: all of them, the server stops), as
        (address, lines held back) for each that held any back; they are forgotten."""
        with self._lock:
            return self._close(float("inf") if everything else self.clock())

    def __len__(self) -> int:
        return len(self._windows)

    def _close(self, now: float) -> list[tuple[str, int]]:
        over = []
        while self._windows:
            address, (start, _, held) = next(iter(self._windows.items()))
            if start + self.window_s > now:
                break
            del self._windows[address]
            if held:
                over.append((address, held))
        if self._others[0] + self.window_s <= now:
            if self._others[1]:
                over.append((OTHERS, self._others[1]))
            self._others = [now if now != float("inf") else self.clock(), 0]
        return over
