"""Who may run code: the token, the bind address, the client's address and the sandbox.

A request that passes the checks is sent with an empty script, so that it answers 422 ("the
script is empty") without starting a worker: 422 here means "allowed in".
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.runner import SelfTest
from app.web.app import create_app

from .conftest import LOCAL

OTHER = ("192.0.2.7", 40000)  # a documentation address: another host
EMPTY = {"source": " "}


def app_client(settings, client=LOCAL, report=None, **changes) -> TestClient:
    """A client of an app whose sandbox self-test found `report` (None: still running)."""
    app = create_app(settings(**changes))
    app.state.selftest = SelfTest(report=report)
    return TestClient(app, client=client)


def status(c: TestClient, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return c.post("/api/runs", json=EMPTY, headers=headers).status_code


def test_loopback_without_token_is_open(settings):
    assert status(app_client(settings)) == 422


def test_a_configured_token_is_required_even_on_loopback(settings):
    c = app_client(settings, token="s3cret")
    response = c.post("/api/runs", json=EMPTY)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert "Authorization: Bearer TOKEN" in response.json()["detail"]
    assert status(c, "wrong") == 401
    assert status(c, "s3cret") == 422
    assert c.post("/api/runs", json=EMPTY, headers={"Authorization": "s3cret"}).status_code == 401
    assert c.get("/api/uploads").json()["token_required"] is True
    assert 'id="token"' in c.get("/own-code").text


def test_public_bind_without_token_refuses_and_says_how_to_start(settings):
    c = app_client(settings, host="0.0.0.0")
    response = c.post("/api/runs", json=EMPTY)
    assert response.status_code == 403
    assert "--token" in response.json()["detail"] and "0.0.0.0" in response.json()["detail"]
    page = c.get("/own-code").text
    assert 'id="refused"' in page and "--token SECRET" in page
    assert 'id="run" class="run-button" disabled' in page
    assert "card-unavailable" in c.get("/").text.split('id="own-code-card"')[0][-80:]


def test_a_client_from_another_host_is_not_loopback_whatever_the_bind_says(settings):
    """`uvicorn --host 0.0.0.0` started directly leaves settings.host at 127.0.0.1."""
    assert status(app_client(settings, client=OTHER)) == 403


@pytest.mark.parametrize("selftest_state, code", [("off", 403), ("running", 503)])
def test_other_hosts_need_a_sandbox_that_held(settings, selftest_state, code):
    c = app_client(settings, client=OTHER, host="0.0.0.0", token="t",
                   selftest=selftest_state != "off")
    response = c.post("/api/runs", json=EMPTY, headers={"Authorization": "Bearer t"})
    assert response.status_code == code
    if code == 503:
        assert response.headers["retry-after"] == "10"
    else:
        assert "sandbox is not complete" in response.json()["detail"]
    # the same machine may still upload: the sandbox's gaps are stated on its page
    assert status(app_client(settings, host="0.0.0.0", token="t"), "t") == 422


def test_other_hosts_may_upload_when_every_layer_held(settings):
    report = {"ok": True, "checked_at": "now", "summary": "every sandbox layer is in place",
              "missing": [], "failing": [], "layers": {}}
    c = app_client(settings, client=OTHER, host="0.0.0.0", token="t", selftest=True,
                   report=report)
    assert status(c, "t") == 422
    assert status(c) == 401
    assert 'data-state="ok"' in c.get("/own-code").text


def test_a_missing_layer_is_named_on_the_page_and_refuses_other_hosts(settings):
    report = {
        "ok": False, "checked_at": "now", "missing": ["landlock"], "failing": ["rlimits"],
        "summary": "sandbox incomplete: landlock unavailable (kernel without Landlock); "
                   "rlimits did not hold",
        "layers": {"landlock": {"available": False, "detail": "kernel without Landlock"},
                   "rlimits": {"available": True, "detail": "setrlimit"}}}
    here = app_client(settings, selftest=True, report=report)
    page = here.get("/own-code").text
    assert 'data-state="done"' in page
    assert "<code>landlock</code> is unavailable on this machine: kernel without Landlock" in page
    assert "<code>rlimits</code> did not hold in the self-test" in page
    assert status(here) == 422  # this machine may still run code, knowing what is missing
    response = app_client(settings, client=OTHER, selftest=True, host="0.0.0.0",
                          token="t", report=report).post("/api/runs", json=EMPTY,
                                          headers={"Authorization": "Bearer t"})
    assert response.status_code == 403 and "landlock unavailable" in response.json()["detail"]
    assert here.get("/healthz").json()["sandbox"]["missing"] == ["landlock"]


# ---- a class's members -----------------------------------------------------------------------

def _browser(app, client=LOCAL) -> TestClient:
    c = TestClient(app, client=client)
    c.get("/")  # its signed session cookie
    return c


def test_a_classs_members_run_code_without_the_token_while_the_class_is_open(settings):
    """A class grants the browsers that joined it the right to run code; nobody else gets it
    from the class: not a program, a made-up cookie, a removed member, a member of an ended
    class, nor the teacher's browser without its token."""
    # these apps run no self-test: members on this machine may run code only where allowed
    # (test_class_members_server.py has the case where they are not)
    app = create_app(settings(token="s3cret", loopback_members_unsandboxed=True))
    bearer = {"Authorization": "Bearer s3cret"}
    teacher = _browser(app)
    code = teacher.post("/api/classes", json={}, headers=bearer).json()["code"]
    student, stranger = _browser(app), _browser(app)
    assert status(student) == 401  # not in the class yet
    refused = student.post("/api/runs", json=EMPTY).json()["detail"]
    assert "Authorization: Bearer TOKEN" in refused and "/c/CODE" in refused
    assert student.get(f"/c/{code}").status_code == 200  # joins
    assert status(student) == 422  # allowed in: no token asked
    policy = student.get("/api/uploads").json()
    assert policy["token_required"] is False and policy["class_member"] == code
    page = student.get("/own-code").text
    assert 'id="token"' not in page and 'id="class-grant"' in page and code in page
    # the rest still need the token
    assert status(stranger) == 401 and stranger.get("/api/uploads").json()["token_required"]
    assert 'id="token"' in stranger.get("/own-code").text
    assert status(teacher) == 401 and status(teacher, "s3cret") == 422
    program = TestClient(app, client=LOCAL)  # no cookie: an address, never a member
    assert status(program) == 401
    # the member's own cookie with a signature the server did not make: no member
    token_part = student.cookies.get("autograd_lab_client").split(".")[0]
    forged = TestClient(app, client=LOCAL,
                        cookies={"autograd_lab_client": token_part + "." + "B" * 22})
    assert status(forged) == 401
    # a removed member loses the right at once
    other = _browser(app)
    other.get(f"/c/{code}")
    assert status(other) == 422
    alias = next(m["alias"] for m in teacher.get(f"/api/classes/{code}/members").json()["members"]
                 if m["alias"] != student.get(f"/api/classes/{code}").json()["me"]["alias"])
    assert teacher.delete(f"/api/classes/{code}/members/{alias}").status_code == 200
    assert status(other) == 401 and status(other, "s3cret") == 422
    assert status(student) == 422
    # the class ends: so does the right
    assert teacher.delete(f"/api/classes/{code}").status_code == 200
    assert status(student) == 401
    assert student.get("/api/uploads").json()["token_required"] is True


def test_a_member_from_another_host_still_needs_a_sandbox_that_held(settings):
    """The class lifts the token, not the sandbox: a member on another machine runs code only
    where every sandbox layer held, as a token holder does."""
    app = create_app(settings(token="s3cret", host="0.0.0.0"))
    app.state.selftest = SelfTest(report=None)  # never checked
    teacher = _browser(app)
    code = teacher.post("/api/classes", json={},
                        headers={"Authorization": "Bearer s3cret"}).json()["code"]
    member = _browser(app, OTHER)
    assert member.get(f"/c/{code}").status_code == 200
    answer = member.post("/api/runs", json=EMPTY)
    assert answer.status_code == 403 and "sandbox" in answer.json()["detail"]
