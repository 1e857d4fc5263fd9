"""The admin page (issue 39) against a real server on one machine, with a token: without the
token it refuses (a page that says what to do, 401); with it, it lists a class started here
with its members and followers, and the runs per person; its actions (remove a member, end a
class, stop a run) are seen by the member's own requests, and each leaves an audit line that
says who did it. Members' names and scripts' names reach the page escaped and cut short."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.server import ARTIFACTS, browsers_of, serve

pytestmark = pytest.mark.slow

TOKEN = "admin-s3cret"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
NAME = "audit-admin-server"
HOSTILE = "<img src=x onerror=alert(1)>"
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
SLOW = "import time\nimport torch\ntime.sleep(60)\n"


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
def base(store_dir):
    with serve(store_dir, name=NAME, TOKEN=TOKEN, MAX_DRAWINGS="1",
               UPLOAD_WORKERS="1", POOL_SIZE="0", WARM_SCENARIOS="false", SELFTEST="false",
               LOOPBACK_MEMBERS_UNSANDBOXED="true", TRACE_TIMEOUT="120") as url:
        yield url


@pytest.fixture
def browsers(base):
    with browsers_of(base) as make:
        yield make


def _audit(event: str) -> list[str]:
    return [line for line in (ARTIFACTS / f"{NAME}.log").read_text().splitlines()
            if f" audit {event} " in line]


def _class(admin: dict, code: str) -> dict | None:
    return next((c for c in admin["classes"] if c["code"] == code), None)


def test_without_the_token_the_page_says_how_in_and_nothing_is_done(base, browsers):
    page = httpx.get(base + "/admin", timeout=30)
    assert page.status_code == 401 and page.headers["www-authenticate"] == "Bearer"
    assert page.headers["content-type"].startswith("text/html")
    assert 'id="admin-token-form"' in page.text and "needs the server&#39;s token" in page.text
    assert "Open classes" not in page.text
    wrong = httpx.get(base + "/admin", headers={"Authorization": "Bearer guess"}, timeout=30)
    assert wrong.status_code == 401 and "admin-token-form" in wrong.text
    assert any(f"request={wrong.headers['x-request-id']}" in line
               for line in _audit("token_refused"))
    assert httpx.get(base + "/api/admin", timeout=30).status_code == 401

    teacher = browsers()
    code = teacher.post("/api/classes", json={}, headers=BEARER).json()["code"]
    for action in (f"/api/admin/classes/{code}/end", "/api/admin/runs/xyz/stop"):
        refused = teacher.post(action, json={})
        assert refused.status_code == 401, refused.text
    # another site's page in a browser that has the token cannot act either: the cross-site
    # guard refuses it before the route (http/guards.py), as for every other POST here
    forged = teacher.post(f"/api/admin/classes/{code}/end", json={}, headers={
        **BEARER, "Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"})
    assert forged.status_code == 403, forged.text
    assert teacher.get(f"/api/classes/{code}").json()["ended"] is False  # still open
    assert teacher.delete(f"/api/classes/{code}").status_code == 200


def test_the_page_lists_a_class_and_its_actions_reach_the_members(base, browsers):
    teacher, ana, ben = browsers(), browsers(), browsers()
    started = teacher.post("/api/classes", json={}, headers=BEARER)
    assert started.status_code == 201, started.text
    code = started.json()["code"]
    for who, name in ((ana, "Ana"), (ben, HOSTILE)):
        assert who.get(f"/c/{code}").status_code == 200  # joins
        assert who.put(f"/api/classes/{code}/name", json={"name": name}).status_code == 200
    ben_name = ben.get(f"/api/classes/{code}").json()["me"]["name"]
    # Ana runs code as a member (no token), so she is among the people with runs
    ran = ana.post("/api/runs", json={"source": SMALL, "name": HOSTILE + ".py"})
    assert ran.status_code == 200, ran.text
    run_id = ran.json()["run"]["id"]

    # Ana follows the class: one follower while her stream is open
    opened = threading.Event()
    done = threading.Event()

    def follow() -> None:
        with ana.stream("GET", f"/api/classes/{code}/events", timeout=30) as events:
            for line in events.iter_lines():
                if line.startswith("data:"):
                    opened.set()
                    done.wait(30)
                    return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert opened.wait(30)
    try:
        admin = httpx.get(base + "/api/admin", headers=BEARER, timeout=30)
        assert admin.status_code == 200, admin.text
        listed = _class(admin.json(), code)
        assert listed is not None and listed["teacher"] == "the server's token"
        assert listed["members_count"] == 2 and listed["followers"] == 1
        assert sorted(m["name"] for m in listed["members"]) == sorted(["Ana", ben_name])
        page = httpx.get(base + "/admin", headers=BEARER, timeout=30)
    finally:
        done.set()
        follower.join(30)
    assert page.status_code == 200 and f"Class {code}" in page.text
    # a member's chosen name and a script's name are text on the page, never markup
    assert "<img" not in page.text and html.escape(HOSTILE, quote=True)[:20] in page.text
    people = admin.json()["people"]
    ana_alias = next(m["alias"] for m in listed["members"] if m["name"] == "Ana")
    hers = next(p for p in people if p["alias"] == ana_alias)
    assert hers["name"] == "Ana" and hers["class"] == code and hers["address"] == "127.0.0.1"
    # a hostile file name never reaches a run (routers/runs.py names it script.py)
    assert hers["runs"][0]["id"] == run_id and hers["runs"][0]["name"] == "script.py"

    # remove Ana: her own requests are refused in the class, and her right to run code is gone
    removed = httpx.post(f"{base}/api/admin/classes/{code}/members/{ana_alias}/remove",
                         json={}, headers=BEARER, timeout=30)
    assert removed.status_code == 200, removed.text
    barred = ana.get(f"/api/classes/{code}")
    assert barred.status_code == 403 and barred.json()["code"] == "removed_from_class"
    assert ana.post("/api/runs", json={"source": SMALL}).status_code == 401
    assert ben.post("/api/runs", json={"source": SMALL}).status_code == 200  # Ben stays in
    (line,) = [x for x in _audit("member_removed") if f"code={code}" in x]
    assert f"alias={ana_alias} by=token via=admin " \
           f"request={removed.headers['x-request-id']}" in line
    after = _class(httpx.get(base + "/api/admin", headers=BEARER, timeout=30).json(), code)
    assert after["members_count"] == 1 and after["removed"] == 1

    # end the class: Ben's requests find no class, and his right to run code ends with it
    ended = httpx.post(f"{base}/api/admin/classes/{code}/end", json={}, headers=BEARER,
                       timeout=30)
    assert ended.status_code == 200, ended.text
    assert ben.get(f"/api/classes/{code}").status_code == 404
    assert ben.post("/api/runs", json={"source": SMALL}).status_code == 401
    assert teacher.get(f"/api/classes/{code}").status_code == 404
    (line,) = [x for x in _audit("class_ended") if f"code={code}" in x]
    assert f"by=token via=admin request={ended.headers['x-request-id']}" in line
    assert _class(httpx.get(base + "/api/admin", headers=BEARER, timeout=30).json(),
                  code) is None


def test_a_running_run_is_stopped_from_the_page(base, browsers):
    someone = browsers()
    sent = someone.post("/api/runs?wait=false", json={"source": SLOW, "name": "sleepy.py"},
                        headers=BEARER)
    assert sent.status_code == 202, sent.text
    run_id = sent.json()["id"]
    deadline = time.monotonic() + 60
    while someone.get(f"/api/runs/{run_id}/status").json()["state"] != "running":
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.2)
    page = httpx.get(base + "/admin", headers=BEARER, timeout=30)
    assert re.search(rf'action="/api/admin/runs/{run_id}/stop"', page.text)
    admin = httpx.get(base + "/api/admin", headers=BEARER, timeout=30).json()
    assert admin["queue"]["running"] == 1 and admin["queue"]["slots"] == 1
    listed = [r for p in admin["people"] for r in p["runs"] if r["id"] == run_id]
    assert listed and listed[0]["state"] == "running" and listed[0]["live"] is True

    stopped = httpx.post(f"{base}/api/admin/runs/{run_id}/stop", json={}, headers=BEARER,
                         timeout=30)
    assert stopped.status_code == 200, stopped.text
    # its sender sees it stopped: the status, and the stored Trace's error (the script's
    # time.sleep(60) never returned, so no Python exception of its own ended it)
    assert someone.get(f"/api/runs/{run_id}/status").json()["state"] == "stopped"
    doc = someone.get(f"/api/runs/{run_id}").json()
    assert doc["error"]["type"] == "Stopped"
    (line,) = [x for x in _audit("run_stopped") if f"run={run_id}" in x]
    assert f"by=token via=admin request={stopped.headers['x-request-id']}" in line
    again = httpx.post(f"{base}/api/admin/runs/{run_id}/stop", json={}, headers=BEARER,
                       timeout=30)
    assert again.status_code == 409 and again.json()["detail"]


def test_a_named_teacher_sees_the_page_without_anyones_address(base, browsers, store_dir):
    """A named teacher (store/teachers.py, added with the CLI beside the running server) opens
    the page too; the class they start is listed as theirs; addresses are the operator's."""
    env = {**os.environ, "AUTOGRAD_LAB_STORE_PATH": str(store_dir / "runs.sqlite3")}
    made = subprocess.run([sys.executable, "-m", "app.cli", "teachers", "add", "carla"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    carla = {"Authorization": f"Bearer {made.stdout.strip()}"}
    teacher, student = browsers(), browsers()
    code = teacher.post("/api/classes", json={}, headers=carla).json()["code"]
    assert student.get(f"/c/{code}").status_code == 200
    assert student.post("/api/runs", json={"source": SMALL}).status_code == 200  # a member

    seen = httpx.get(base + "/api/admin", headers=carla, timeout=30)
    assert seen.status_code == 200, seen.text
    listed = _class(seen.json(), code)
    assert listed["teacher"] == "carla" and listed["members_count"] == 1
    assert seen.json()["people"] and all(p["address"] is None for p in seen.json()["people"])
    operator = httpx.get(base + "/api/admin", headers=BEARER, timeout=30).json()
    assert any(p["address"] == "127.0.0.1" for p in operator["people"])
    page = httpx.get(base + "/admin", headers=carla, timeout=30)
    assert page.status_code == 200 and "carla (a named teacher)" in page.text
    ended = httpx.post(f"{base}/api/admin/classes/{code}/end", json={}, headers=carla,
                       timeout=30)
    assert ended.status_code == 200
    (line,) = [x for x in _audit("class_ended") if f"code={code}" in x]
    assert "by=teacher:carla via=admin" in line


def test_a_revoked_teacher_teaches_their_open_class_no_more(base, browsers, store_dir):
    """Attack round 2: a named teacher's browser keeps its class's cookie after the token is
    revoked; revoking must end what that browser can do in the class too (within the store's
    few seconds), not only new classes and the admin page. The server token's classes go on."""
    env = {**os.environ, "AUTOGRAD_LAB_STORE_PATH": str(store_dir / "runs.sqlite3")}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "teachers", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    made = cli("add", "dave")
    assert made.returncode == 0, made.stderr
    dave = {"Authorization": f"Bearer {made.stdout.strip()}"}
    theirs, ours, student = browsers(), browsers(), browsers()
    code = theirs.post("/api/classes", json={}, headers=dave).json()["code"]
    other = ours.post("/api/classes", json={}, headers=BEARER).json()["code"]
    assert student.get(f"/c/{code}").status_code == 200
    alias = student.get(f"/api/classes/{code}").json()["me"]["alias"]
    assert theirs.get(f"/api/classes/{code}/members").status_code == 200  # teaches it now
    assert theirs.get(f"/api/classes/{code}").json()["role"] == "teacher"

    # the teacher's page follows the class: its stream must end once the token is revoked
    events: list[str] = []
    opened = threading.Event()

    def follow() -> None:
        with theirs.stream("GET", f"/api/classes/{code}/events", timeout=60) as stream:
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    opened.set()
                if line.startswith("event:"):
                    events.append(line.removeprefix("event:").strip())
                    return

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    assert opened.wait(30)
    assert cli("revoke", "dave").returncode == 0
    deadline = time.monotonic() + 30  # the store's answers are remembered 5 s (REMEMBER_S)
    while (answer := theirs.get(f"/api/classes/{code}/members")).status_code == 200:
        assert time.monotonic() < deadline, "the revoked teacher still teaches the class"
        time.sleep(1)
    assert answer.status_code == 403 and answer.json()["code"] == "teacher_revoked", answer.text
    removed = theirs.delete(f"/api/classes/{code}/members/{alias}")
    assert removed.status_code == 403, removed.text
    # nor does it read the teacher's view (answers, who sent what) any more
    assert theirs.get(f"/api/classes/{code}").status_code == 403
    follower.join(40)  # the stream wakes at least every 15 s (PING_SECONDS)
    assert events == ["revoked"], events
    assert student.get(f"/api/classes/{code}").status_code == 200  # the student is still in
    assert httpx.get(base + "/api/admin", headers=dave, timeout=30).status_code == 401
    assert ours.get(f"/api/classes/{other}/members").status_code == 200
