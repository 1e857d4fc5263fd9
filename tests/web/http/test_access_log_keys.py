"""Whose window an access line counts in: the place client_keys.py names, as for the audit
log's refusals. A unit test of the filter on uvicorn's own record shape (client, method,
path, HTTP version, status): a real server cannot be reached from several addresses of one
IPv6 /64 here (binding them needs them configured on an interface, which needs root), while
the loopback case is served for real in test_access_log_server.py."""

from __future__ import annotations

import logging
from pathlib import Path

from app.web.http.access_log import AccessLogBound


def _line(client: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                             '%s - "%s %s HTTP/%s" %d', (client, "GET", "/healthz", "1.1", 200),
                             None)


def test_addresses_of_one_ipv6_64_share_one_window():
    bound = AccessLogBound(per_address=2)
    # uvicorn writes the client as "%s:%d" % (host, port), no brackets around an IPv6 host
    same_64 = ["2001:db8:5:7::1:4000", "2001:db8:5:7::2:4001", "2001:db8:5:7:ffff::9:80"]
    written = [bound.filter(_line(client)) for client in same_64]
    assert written == [True, True, False]
    # another /64 has a window of its own
    assert bound.filter(_line("2001:db8:5:8::1:4000"))


def test_all_of_loopback_is_one_window_unless_kept_apart():
    together = AccessLogBound(per_address=1)
    assert [together.filter(_line(f"127.0.0.{n}:5000")) for n in (2, 3)] == [True, False]
    apart = AccessLogBound(per_address=1)
    apart.loopback_apart = True
    assert [apart.filter(_line(f"127.0.0.{n}:5000")) for n in (2, 3)] == [True, True]


def test_the_course_guide_names_the_held_back_line_as_it_is_written(caplog):
    """docs/running-a-course.md quotes the line an operator greps for: the line the filter
    writes, with its address and count as placeholders."""
    now = [0.0]
    bound = AccessLogBound(per_address=1, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="autograd_lab.access"):
        assert [bound.filter(_line("203.0.113.7:4000")) for _ in range(3)] == [True, False, False]
        now[0] = 61.0
        bound.sweep()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "autograd_lab.access"]
    assert "203.0.113.7" in said and "=2" in said, said
    quoted = said.replace("203.0.113.7", "ADDR").replace("=2", "=N", 1)
    guide = (Path(__file__).resolve().parents[3] / "docs" / "running-a-course.md").read_text()
    assert f"`{quoted}`" in " ".join(guide.split()), quoted
