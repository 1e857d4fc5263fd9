"""Every loopback address is one place (issue 38, point 2): on a shared machine any local user
can bind 127.0.0.2, 127.0.0.3, ... and was counted as another machine each time: members past
the 4-per-address cap, all of a server's connections. Against a real server with the default
settings; the other hostile tests stand for many machines with `loopback_addresses_apart`."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.server import serve

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("store"), name="loopback-one-place", POOL_SIZE="0",
               WARM_SCENARIOS="false", SELFTEST="false", PER_ADDRESS_CONNECTIONS="2") as url:
        yield url


def _browser(base: str, peer: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60,
                          transport=httpx.HTTPTransport(local_address=peer))
    assert client.get("/").status_code == 200 and client.cookies  # its session cookie
    return client


def test_browsers_from_many_loopback_addresses_are_one_addresss_people(base):
    with httpx.Client(base_url=base, timeout=60) as teacher:
        assert teacher.get("/").status_code == 200
        started = teacher.post("/api/classes", json={})
        assert started.status_code == 201, started.text
        code = started.json()["code"]
        statuses = []
        for n in range(2, 8):  # six "machines" of one local user
            browser = _browser(base, f"127.0.0.{n}")
            try:
                answer = browser.get(f"/api/classes/{code}")
                statuses.append((answer.status_code, answer.json().get("code")))
            finally:
                browser.close()
        # per_address_people is 4: the fifth and sixth are that one place's fifth and sixth
        assert statuses == [(200, code)] * 4 + [(429, "address_full")] * 2
        members = teacher.get(f"/api/classes/{code}/members").json()
        assert members["count"] == 4
        assert {m["address"] for m in members["members"]} == {"address 1"}  # one group
        teacher.delete(f"/api/classes/{code}")
        # the next normal run from the machine still works
        ran = teacher.post("/api/runs", json={"source": "import torch\n"
                                              "w = torch.ones(2, requires_grad=True)\n"
                                              "(w * w).sum().backward()\n"})
        assert ran.status_code == 200 and ran.json()["error"] is None, ran.text


def test_connections_from_many_loopback_addresses_share_one_addresss_cap(base):
    port = int(base.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port), timeout=10,
                                     source_address=(f"127.0.0.{n}", 0)) for n in (2, 3)]
    try:  # two held from two addresses: a third, from a third, is past the one place's 2
        with httpx.Client(timeout=10, transport=httpx.HTTPTransport(
                local_address="127.0.0.4")) as third:
            assert third.get(base + "/healthz").status_code == 503
    finally:
        for s in held:
            s.close()
