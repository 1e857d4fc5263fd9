"""uvicorn's access log, bounded per client address: a line per request let anyone who can
reach the server fill the disk under its log at the rate it answers (`/healthz` answers
thousands a second), which the audit log's bound (audit.py) did not cover.

Per address, the first PER_ADDRESS requests in a WINDOW_S-second window keep their access line;
the rest are counted and said in one line on the logger `autograd_lab.access` once the window is
over (`access_lines_held_back address=A count=N within_s=60`), within seconds (app.py's sweep)
or when the server stops. The counting is address_windows.py's: at most OVERALL addresses at
once, the rest together as `others`. PER_ADDRESS is a classroom's worth: thirty students
behind one school address each opening a page (about forty requests with its scripts) fit
in two windows' share, and what is held back is counted, not lost silently.

An address is client_keys.py's place, as for the audit log's refusals: an IPv6 /64 is one, so a
machine holding a /64 cannot fill all OVERALL windows and push everyone else's lines out; all
of loopback is one unless the setting `loopback_addresses_apart`. A line's path (with its
query) is cut to PATH_CHARS: a bound on lines alone let a 16 KiB request line make every
line 16 KiB."""

from __future__ import annotations

import logging

from app.web.client_keys import address_key
from app.web.settings import Settings

from .address_windows import AddressWindows
from .own_logs import to_stderr_unless_configured

__all__ = ["ACCESS_LOG", "AccessLogBound"]

PER_ADDRESS = 600  # access lines per address and window
WINDOW_S = 60.0
OVERALL = 100
PATH_CHARS = 200  # of a line's path and query, as audit.py's values
log = logging.getLogger("autograd_lab.access")


class AccessLogBound(logging.Filter):
    """A filter on uvicorn's access logger (`install`); lines past the bound are counted."""

    def __init__(self, per_address: int = PER_ADDRESS, window_s: float = WINDOW_S,
                 overall: int = OVERALL, **clock) -> None:
        super().__init__()
        self.windows = AddressWindows(per_address, window_s, overall, **clock)
        self.loopback_apart = False

    def filter(self, record: logging.LogRecord) -> bool:
        write, over = self.windows.admit(address_key(_host(record), self.loopback_apart))
        self._say(over)
        if write:
            _cut_path(record)
        return write

    def sweep(self) -> None:
        self._say(self.windows.close())

    def install(self, settings: Settings) -> None:
        """The setting `loopback_addresses_apart` says what an address is."""
        self.loopback_apart = settings.loopback_addresses_apart
        to_stderr_unless_configured(log, "access")
        logging.getLogger("uvicorn.access").addFilter(self)  # once: addFilter keeps one copy

    def uninstall(self) -> None:
        """The server stops: its filter goes, and every window's count is said."""
        logging.getLogger("uvicorn.access").removeFilter(self)
        self._say(self.windows.close(everything=True))

    def _say(self, over: list[tuple[str, int]]) -> None:
        for address, held in over:
            log.info("access_lines_held_back address=%s count=%d within_s=%d", address, held,
                     round(self.windows.window_s))


def _host(record: logging.LogRecord) -> str:
    """The client's host from uvicorn's access record, whose first argument is "host:port"
    (the address after the trusted proxies' correction: the same scope the app saw)."""
    args = record.args
    first = args[0] if isinstance(args, tuple) and args else ""
    host = str(first).rpartition(":")[0] or str(first)
    return host[:64] or "-"


def _cut_path(record: logging.LogRecord) -> None:
    """uvicorn's access record's arguments are (client, method, path with query, HTTP
    version, status); the path is cut to PATH_CHARS."""
    args = record.args
    if isinstance(args, tuple) and len(args) >= 3 and len(str(args[2])) > PATH_CHARS:
        record.args = (*args[:2], str(args[2])[:PATH_CHARS], *args[3:])


ACCESS_LOG = AccessLogBound()
