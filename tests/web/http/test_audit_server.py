"""Request ids and audit lines (issue 39), against a real server and its real log: every answer
carries an X-Request-ID of the server's making, and a class started, a member removed, a class
ended and a wrong token each leave one line in the log with that request's id."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.server import ARTIFACTS, serve

pytestmark = pytest.mark.slow

TOKEN = "audit-s3cret"
ID = re.compile(r"[0-9a-f]{16}")


def _lines(name: str, event: str) -> list[str]:
    return [line for line in (ARTIFACTS / f"{name}.log").read_text().splitlines()
            if f" audit {event} " in line]


def test_class_actions_and_wrong_tokens_are_audited_with_the_requests_id(tmp_path):
    name = "audit-server"
    with serve(tmp_path, name=name, TOKEN=TOKEN, POOL_SIZE="0", WARM_SCENARIOS="false",
               SELFTEST="false") as base, \
            httpx.Client(base_url=base, timeout=60) as teacher, \
            httpx.Client(base_url=base, timeout=60) as student:
        assert teacher.get("/").status_code == 200 and student.get("/").status_code == 200
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        started = teacher.post("/api/classes", json={}, headers=bearer)
        assert started.status_code == 201, started.text
        code, start_id = started.json()["code"], started.headers["x-request-id"]
        assert ID.fullmatch(start_id)
        # a client cannot choose its id: the server's own is answered
        chosen = teacher.get("/healthz", headers={"X-Request-ID": "mine"})
        assert ID.fullmatch(chosen.headers["x-request-id"])
        assert chosen.headers["x-request-id"] != start_id
        # a refusal by the guards in front of the routes has one too
        rebinding = httpx.get(base + "/", headers={"Host": "evil.example"}, timeout=30)
        assert rebinding.status_code == 400 and ID.fullmatch(rebinding.headers["x-request-id"])

        assert student.get(f"/c/{code}").status_code == 200  # joins
        alias = teacher.get(f"/api/classes/{code}/members").json()["members"][0]["alias"]
        removed = teacher.delete(f"/api/classes/{code}/members/{alias}")
        assert removed.status_code == 200
        wrong = student.post("/api/classes", json={}, headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        none_given = student.post("/api/classes", json={})  # no token at all: no attempt
        assert none_given.status_code == 401
        ended = teacher.delete(f"/api/classes/{code}")
        assert ended.status_code == 200

    (start,) = _lines(name, "class_started")
    assert f"code={code} by=token address=127.0.0.1 request={start_id}" in start
    (gone,) = _lines(name, "member_removed")
    assert f"code={code} alias={alias} request={removed.headers['x-request-id']}" in gone
    (refused,) = _lines(name, "token_refused")  # the attempt, not the request without one
    assert f"path=/api/classes address=127.0.0.1 request={wrong.headers['x-request-id']}" \
        in refused
    (end,) = _lines(name, "class_ended")
    assert f"code={code} request={ended.headers['x-request-id']}" in end


def test_a_value_from_a_request_cannot_start_a_line_of_its_own():
    from app.web.audit import _value

    assert _value("/api/classes") == "/api/classes"
    forged = _value("x\n2026-01-01 audit class_ended code=ABCDEF")
    assert "\n" not in forged and forged.startswith('"')
    assert len(_value("a" * 1000)) == 200
