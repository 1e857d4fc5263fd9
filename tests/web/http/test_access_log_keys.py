"""Whose window an access line counts in: the place client_keys.py names, as for the audit
log's refusals. A unit test of the filter on uvicorn's own record shape (client, method,
path, HTTP version, status): a real server cannot be reached from several addresses of one
IPv6 /64 here (binding them needs them configured on an interface, which needs root), while
the loopback case is served for real in test_access_log_server.py."""

from __future__ import annotations

import logging

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
