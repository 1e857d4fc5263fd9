"""The upload routes answer through the upload service (app/web/runs/uploads.py), in process with
the real runner: `?wait=false` (202 and a status to follow to `done`), a status and a stop for runs
that never were or have ended, and a stop by the owner's session or by the token's holder."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from app.web.app import create_app
from app.web.http.clients import COOKIE
from tests.web.conftest import LOCAL

TOKEN = "upload-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"


@pytest.fixture(scope="module")
def c(tiny_dir, settings) -> TestClient:
    app = create_app(settings(token=TOKEN, upload_workers=1, upload_timeout=60),
                     scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as client:
        yield client


def session(c: TestClient) -> str:
    """A new person: the signed cookie a first page gives."""
    c.cookies.clear()
    c.get("/")
    return c.cookies[COOKIE]


def as_(c: TestClient, cookie: str) -> TestClient:
    c.cookies.clear()
    c.cookies.set(COOKIE, cookie)
    return c


def wait_for(predicate, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_wait_false_answers_202_then_the_status_follows_the_run_to_done(c):
    ann = session(c)
    sent = as_(c, ann).post("/api/runs?wait=false", json={"source": SMALL}, headers=AUTH)
    assert sent.status_code == 202, sent.text
    started = sent.json()
    run_id = started["id"]
    assert started["state"] in ("queued", "running") and started["link"] == f"/runs/{run_id}"
    assert started["limit_s"] == 60
    wait_for(lambda: c.get(f"/api/runs/{run_id}/status").json()["state"] == "done")
    doc = c.get(f"/api/runs/{run_id}").json()
    assert doc["error"] is None and doc["run"] == {"id": run_id, "link": f"/runs/{run_id}"}
    ended = c.delete(f"/api/runs/{run_id}", headers=AUTH)
    assert ended.status_code == 409 and "already ended (done)" in ended.json()["detail"]


def test_a_run_nobody_sent_is_404_for_its_status_and_its_stop(c):
    status = c.get("/api/runs/nope/status")
    assert status.status_code == 404 and status.json()["detail"] == "no run 'nope'"
    stop = c.delete("/api/runs/nope", headers=AUTH)
    assert stop.status_code == 404 and "waiting or running" in stop.json()["detail"]


def test_only_the_owner_or_the_token_holder_stops_a_run(c):
    ann, bob = session(c), session(c)
    sent = as_(c, ann).post("/api/runs?wait=false", json={"source": LOOP}, headers=AUTH)
    run_id = sent.json()["id"]
    wait_for(lambda: c.get(f"/api/runs/{run_id}/status").json()["state"] == "running")
    refused = as_(c, bob).delete(f"/api/runs/{run_id}")
    assert refused.status_code == 403 and "only the person" in refused.json()["detail"]
    assert c.get(f"/api/runs/{run_id}/status").json()["state"] == "running"
    early = c.get(f"/api/runs/{run_id}")  # nothing stored yet: its page says to wait
    assert early.status_code == 404 and "still waiting or running" in early.json()["detail"]
    stopped = as_(c, bob).delete(f"/api/runs/{run_id}", headers=AUTH)  # bob has the token
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
    kept = c.get(f"/api/runs/{run_id}").json()
    assert kept["error"]["type"] == "Stopped" and kept["script"]["source"] == LOOP
