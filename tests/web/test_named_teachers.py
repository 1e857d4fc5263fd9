"""Named teachers (issue 39): several tokens, each with a name, kept as digests, revocable one by
one, beside the server's own token. In-process apps for the rules, the real CLI for its
commands, and a real web process on PostgreSQL for a revocation reaching the server."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from app.web.store import teachers as teachers_module
from app.web.store.teachers import TeacherError

from .conftest import LOCAL

EMPTY = {"source": " "}  # allowed in: 422 "the script is empty", no worker started


def _runs(c: TestClient, token: str) -> int:
    return c.post("/api/runs", json=EMPTY, headers={"Authorization": f"Bearer {token}"}
                  ).status_code


def test_a_named_teachers_token_works_until_it_is_revoked(settings, monkeypatch):
    monkeypatch.setattr(teachers_module, "REMEMBER_S", 0.0)  # each request asks the store
    app = create_app(settings(token="server-s3cret"))
    ana, ben = app.state.teachers.add("ana"), app.state.teachers.add("ben")
    c = TestClient(app, client=LOCAL)
    c.get("/")  # its session cookie, for the class
    assert _runs(c, ana) == 422 and _runs(c, ben) == 422 and _runs(c, "server-s3cret") == 422
    assert _runs(c, "made-up") == 401
    started = c.post("/api/classes", json={}, headers={"Authorization": f"Bearer {ben}"})
    assert started.status_code == 201
    app.state.teachers.revoke("ben")
    assert _runs(c, ben) == 401 and _runs(c, ana) == 422  # only ben's
    assert [(t["name"], bool(t["revoked"])) for t in app.state.teachers.listed()] == \
        [("ana", False), ("ben", True)]
    # a new token for ben: the old one stays refused
    ben_again = app.state.teachers.add("ben")
    assert _runs(c, ben_again) == 422 and _runs(c, ben) == 401


def test_tokens_are_kept_as_digests_and_names_are_checked(settings):
    app = create_app(settings(token="server-s3cret"))
    token = app.state.teachers.add("ana")
    with sqlite3.connect(app.state.store.path) as db:
        rows = db.execute("SELECT name, digest FROM teacher_tokens").fetchall()
    assert rows == [("ana", teachers_module.digest(token))]
    assert token.encode() not in app.state.store.path.read_bytes()
    with pytest.raises(TeacherError, match="already"):
        app.state.teachers.add("ana")
    for bad in ("", "Ana", "a b", "x" * 41, "1st", "ana\n"):
        with pytest.raises(TeacherError, match="a teacher's name"):
            app.state.teachers.add(bad)
    with pytest.raises(TeacherError, match="no teacher 'zoe'"):
        app.state.teachers.revoke("zoe")


def test_a_server_without_a_token_of_its_own_takes_no_named_one(settings):
    """Named tokens share out the server's right; a server with none has none to share."""
    app = create_app(settings(host="0.0.0.0"))
    ana = app.state.teachers.add("ana")
    c = TestClient(app, client=("192.0.2.7", 40000))
    answer = c.post("/api/runs", json=EMPTY, headers={"Authorization": f"Bearer {ana}"})
    assert answer.status_code == 403 and answer.json()["code"] == "no_token_configured"


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "teachers", *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
@pytest.mark.postgres
def test_the_cli_revokes_a_second_teacher_on_a_running_shared_server(tmp_path, postgres_url):
    from tests.postgres import fresh_database
    from tests.server import ARTIFACTS, serve

    database = fresh_database(postgres_url)
    env = {**os.environ, "AUTOGRAD_LAB_DATABASE_URL": database}
    with serve(tmp_path, name="named-teachers", DATABASE_URL=database, TOKEN="server-s3cret",
               WARM_SCENARIOS="false", POOL_SIZE="0", SELFTEST="false") as base:
        made = {name: _cli("add", name, env=env) for name in ("ana", "ben")}
        assert all(m.returncode == 0 for m in made.values()), made
        ana, ben = (made[n].stdout.strip() for n in ("ana", "ben"))
        assert "shown this once" in made["ana"].stderr
        listed = _cli("list", env=env)
        assert listed.stdout.split() == ["ana", "active", "ben", "active"]
        with httpx.Client(base_url=base, timeout=60) as browser:
            assert browser.get("/").status_code == 200
            started = browser.post("/api/classes", json={},
                                   headers={"Authorization": f"Bearer {ben}"})
            assert started.status_code == 201, started.text
            code = started.json()["code"]
            assert browser.get(f"/api/classes/{code}/members").status_code == 200
            assert _cli("revoke", "ben", env=env).returncode == 0
            deadline = time.monotonic() + 30  # each process remembers an answer 5 s
            while (status := browser.post("/api/runs", json=EMPTY, headers={
                    "Authorization": f"Bearer {ben}"}).status_code) != 401:
                assert status == 422 and time.monotonic() < deadline
                time.sleep(0.5)
            assert browser.post("/api/runs", json=EMPTY, headers={
                "Authorization": f"Bearer {ana}"}).status_code == 422
            # the class ben started: his browser teaches it no more (its cookie is no token)
            while (taught := browser.get(f"/api/classes/{code}/members")).status_code == 200:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            assert taught.json()["code"] == "teacher_revoked", taught.text
        assert _cli("revoke", "ben", env=env).returncode == 2  # revoked already: said
        assert _cli("add", "Bad Name", env=env).returncode == 2
    log = (ARTIFACTS / "named-teachers.log").read_text()
    assert "audit class_started" in log and "by=teacher:ben" in log
