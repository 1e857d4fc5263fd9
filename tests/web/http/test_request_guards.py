"""Who may ask a real server to run code, by what a request says of where it comes from: the
Host it names (DNS rebinding), forwarding headers (a proxy on the same host), and the headers
browsers add to another site's requests (issue 9, points 1 and 2)."""

from __future__ import annotations

import httpx
import pytest

from tests.server import serve

SMALL = "import torch\nw = torch.ones(2, requires_grad=True)\n(w * 3).sum().backward()\n"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    # token-less and on loopback: the server is the machine's user's, and trusts only them
    with serve(tmp_path_factory.mktemp("store"), name="guards-server", SELFTEST="false",
               POOL_SIZE="1") as url:
        yield url


def test_a_direct_loopback_client_may_run_code(base):
    response = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120)
    assert response.status_code == 200 and response.json()["error"] is None


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example",
                                  "localhost.evil.example:80"])
def test_a_foreign_host_name_is_refused(base, host):
    for method in ("GET", "POST"):
        response = httpx.request(method, base + "/api/runs" if method == "POST" else base + "/",
                                 headers={"Host": host}, json={"source": SMALL}, timeout=30)
        assert response.status_code == 400, (method, response.text)
        assert "ALLOWED_HOSTS" in response.json()["detail"]
    assert httpx.get(base + "/healthz", timeout=10).status_code == 200  # it still serves


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]"])
def test_the_loopback_names_are_answered(base, host):
    port = base.rsplit(":", 1)[1]
    response = httpx.get(base + "/healthz", headers={"Host": f"{host}:{port}"}, timeout=10)
    assert response.status_code == 200


@pytest.mark.parametrize("header", ["X-Forwarded-For", "Forwarded", "X-Real-IP"])
def test_a_relayed_request_is_treated_as_remote(base, header):
    value = "for=203.0.113.9" if header == "Forwarded" else "203.0.113.9"
    response = httpx.post(base + "/api/runs", json={"source": SMALL},
                          headers={header: value}, timeout=60)
    assert response.status_code == 403, response.text
    assert "token" in response.json()["detail"]
    # even when the proxy says the client is local: the header alone makes it remote
    relayed_local = httpx.post(base + "/api/runs", json={"source": SMALL},
                               headers={"X-Forwarded-For": "127.0.0.1"}, timeout=60)
    assert relayed_local.status_code == 403
    policy = httpx.get(base + "/api/uploads", headers={header: value}, timeout=10).json()
    assert policy["accepts"] is False


def test_another_site_s_page_is_refused_and_the_next_normal_run_works(base):
    for headers in ({"Sec-Fetch-Site": "cross-site"}, {"Origin": "http://evil.example"}):
        response = httpx.post(base + "/api/runs", files={"file": ("x.py", SMALL.encode())},
                              headers=headers, timeout=60)
        assert response.status_code == 403, response.text
    after = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120)
    assert after.status_code == 200 and after.json()["error"] is None
