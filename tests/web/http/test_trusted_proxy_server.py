"""Behind a reverse proxy (issue 39): with `forwarded_allow_ips` naming the proxy, a request
it relays counts against the per-address limits by the address it was forwarded for, and the
proxy's own connections are not held to the per-address connection cap; a forwarding header
from any other peer is ignored. A real server on loopback; the proxy is this test, sending
from its own loopback address with the header a proxy writes (X-Forwarded-For)."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow

PROXY = "127.0.0.31"     # the reverse proxy, as the server sees it
STRANGER = "127.0.0.32"  # another peer, writing the same header itself


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="trusted-proxy-server",
               FORWARDED_ALLOW_IPS=f"{PROXY}/32", PER_ADDRESS_CONNECTIONS="2", POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", LOOPBACK_ADDRESSES_APART="true") as url:
        yield url


def _browser(base: str, peer: str, forwarded_for: str | None) -> httpx.Client:
    headers = {"X-Forwarded-For": forwarded_for} if forwarded_for else {}
    client = httpx.Client(base_url=base, timeout=60, headers=headers,
                          transport=httpx.HTTPTransport(local_address=peer))
    assert client.get("/").status_code == 200 and client.cookies
    return client


def _joins(base: str, code: str, peer: str, forwarded: list[str | None]) -> list[int]:
    statuses = []
    for address in forwarded:
        browser = _browser(base, peer, address)
        try:
            statuses.append(browser.get(f"/api/classes/{code}").status_code)
        finally:
            browser.close()
    return statuses


@pytest.fixture
def code(base):
    with httpx.Client(base_url=base, timeout=60) as teacher:  # on the server's machine
        assert teacher.get("/").status_code == 200  # its session cookie
        started = teacher.post("/api/classes", json={})
        assert started.status_code == 201, started.text
        yield started.json()["code"]
        teacher.delete(f"/api/classes/{started.json()['code']}")


def test_students_behind_the_trusted_proxy_are_told_apart_by_their_forwarded_address(
        base, code):
    # six students, six addresses: none is turned away (per_address_people is 4)
    assert _joins(base, code, PROXY, [f"10.1.0.{i}" for i in range(6)]) == [200] * 6
    # five browsers forwarded for one address: that address's limit holds, as it would
    assert _joins(base, code, PROXY, ["10.2.0.1"] * 5) == [200] * 4 + [429]


def test_a_forwarding_header_from_another_peer_is_not_believed(base, code):
    # the stranger names five addresses; the server counts the stranger's own, once
    assert _joins(base, code, STRANGER, [f"10.3.0.{i}" for i in range(5)]) == [200] * 4 + [429]


def _held(base: str, peer: str, count: int) -> list[socket.socket]:
    """`count` connections from `peer`, each opened and left waiting for its request."""
    port = int(base.rsplit(":", 1)[1])
    held = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=10,
                                     source_address=(peer, 0))
        held.append(s)
    return held


def _status_of_one_more(base: str, peer: str) -> int:
    with httpx.Client(timeout=10, transport=httpx.HTTPTransport(local_address=peer)) as c:
        return c.get(base + "/healthz").status_code


@pytest.mark.parametrize("peer, status", [(PROXY, 200), (STRANGER, 503)])
def test_the_proxy_may_hold_more_connections_than_one_address(base, peer, status):
    held = _held(base, peer, 2)  # per_address_connections is 2
    try:
        assert _status_of_one_more(base, peer) == status
    finally:
        for s in held:
            s.close()


def test_the_servers_settings_refuse_a_proxy_named_by_host_name(tmp_path):
    from app.web.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="forwarded_allow_ips must be addresses"):
        Settings(forwarded_allow_ips="proxy.example")


def test_a_proxy_trusted_by_a_loopback_address_trusts_every_local_user(caplog):
    """The attacker's read: with the documented FORWARDED_ALLOW_IPS=127.0.0.1, a local user
    connecting past the proxy named a new address per request and was eight members. The
    server cannot tell them from the proxy; it says so at start."""
    import logging

    from app.web.trusted_proxies import TrustedProxies, warn_if_local_users_trusted

    for spec, local in (("127.0.0.1", True), ("127.0.0.0/8", True), ("::1", True),
                        ("*", True), ("10.0.0.5, 192.168.0.0/16", False), ("", False)):
        assert TrustedProxies(spec).trusts_local_users() is local, spec
    with caplog.at_level(logging.WARNING, logger="autograd_lab.web"):
        warn_if_local_users_trusted("10.0.0.5")
        assert not caplog.records
        warn_if_local_users_trusted("127.0.0.1")
    (record,) = caplog.records
    assert "any user of this machine can connect to the app's port directly" in record.message
