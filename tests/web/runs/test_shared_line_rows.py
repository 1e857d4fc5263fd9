"""The shared line's rows, without an upload host process: what an upload host does to runs that
another process left half done (tests/web/runs/test_upload_host_failover_server.py has the
processes)."""

from __future__ import annotations

import pytest

from app.web.runs.queue import Submission
from app.web.runs.shared_queue import SharedQueue
from app.web.runs.upload_host import UploadHost
from app.web.settings import Settings
from app.web.store.postgres import PostgresRunStore
from tests.postgres import fresh_database

pytestmark = pytest.mark.postgres


@pytest.fixture
def url(postgres_url):
    return fresh_database(postgres_url)


def test_a_run_booked_but_never_queued_is_failed_and_one_waiting_in_line_is_not(url, tmp_path):
    """A web process that stops between booking a run and handing it to Procrastinate leaves
    a row with no job: after a minute an upload host fails it (its script kept, what to do said),
    so it holds nobody's share or place. A run as old that has its job, waiting for an upload host,
    is left in line."""
    store = PostgresRunStore(url, pool_size=2)
    queue = SharedQueue(store, running=1, queued=1, queue_size=10, wait_for_upload_hosts=True)
    waiting = queue.submit(Submission("alice", "waits.py", "print(1)\n", "cpu", 10.0))
    with store.database.transaction() as db:  # what a booking leaves before its job is made
        db.execute("INSERT INTO uploads (id, client, address, name, source, device, "
                   "time_limit, state) VALUES ('orphan', 'bob', '', 'lost.py', 'print(2)\n', "
                   "'cpu', 10, 'queued')")
        db.execute("UPDATE uploads SET created = now() - interval '2 minutes'")
    worker = UploadHost(Settings(database_url=url, store_path=str(tmp_path / "x.sqlite3"),
                                   pool_size=0, selftest=False))
    try:
        worker._fail_unqueued()
        lost = queue.status("orphan")
        assert lost["state"] == "failed" and "never reached the line" in lost["detail"], lost
        doc = store.get("orphan")
        assert doc["script"]["source"] == "print(2)\n" and \
            doc["error"]["type"] == "ServerError", doc
        assert queue.status(waiting)["state"] == "queued"
    finally:
        worker.store.close()
        queue.close()
        store.close()


def _host(url: str, tmp_path, name: str, slots: int) -> UploadHost:
    """An upload host's own heartbeat, once (UploadHost._beat): its row in the line."""
    host = UploadHost(Settings(database_url=url, store_path=str(tmp_path / f"{name}.sqlite3"),
                               pool_size=0, selftest=False, upload_workers=slots))
    host._beat()
    return host


def test_with_no_upload_host_a_run_is_refused_at_once_and_healthz_says_why(url, tmp_path):
    from app.web.runs.shared_queue import NoUploadHost

    store = PostgresRunStore(url, pool_size=2)
    queue = SharedQueue(store, running=1, queued=1, queue_size=10)
    host = None
    try:
        line = queue.line()
        assert line["upload_hosts"] == [] and line["slots"] == 0 and line["waiting"] == 0
        assert "refused (503) until one starts" in line["detail"]
        with pytest.raises(NoUploadHost, match="autograd-lab upload-host"):
            queue.submit(Submission("alice", "a.py", "print(1)\n", "cpu", 10.0))
        assert queue.line()["waiting"] == 0  # nothing was left in line
        host = _host(url, tmp_path, "h", slots=3)
        run_id = queue.submit(Submission("alice", "a.py", "print(1)\n", "cpu", 10.0))
        line = queue.line()
        assert [(h["name"], h["slots"]) for h in line["upload_hosts"]] == [(host.name, 3)]
        assert line["slots"] == 3 and line["waiting"] == 1 and line["oldest_wait_s"] >= 0
        assert "detail" not in queue.status(run_id)  # someone will take it
    finally:
        if host is not None:
            host.store.close()
        queue.close()
        store.close()


def test_where_the_operator_lets_runs_wait_their_status_says_no_host_is_running(url):
    store = PostgresRunStore(url, pool_size=2)
    queue = SharedQueue(store, running=1, queued=1, queue_size=10, wait_for_upload_hosts=True)
    try:
        run_id = queue.submit(Submission("alice", "a.py", "print(1)\n", "cpu", 10.0))
        status = queue.status(run_id)
        assert status["state"] == "queued" and "no upload host is running now" in status["detail"]
        assert "accepted and wait for one" in queue.line()["detail"]
    finally:
        queue.close()
        store.close()


def test_the_app_with_no_upload_host_answers_503_with_what_to_do_and_healthz_degrades(
        url, settings, tiny_dir, tmp_path):
    """What a person and an operator see, through the app: a run refused at once (not left
    "queued, place 1" for ever), and /healthz "degraded" naming no upload host; once one beats,
    /healthz is ok and names it."""
    from fastapi.testclient import TestClient

    from app.web.app import create_app
    from tests.web.conftest import LOCAL

    app = create_app(settings(database_url=url), scenarios_dir=tiny_dir)
    with TestClient(app, client=LOCAL) as c:
        c.get("/")  # a browser's cookie
        health = c.get("/healthz").json()
        assert health["status"] == "degraded" and health["uploads"]["upload_hosts"] == []
        sent = c.post("/api/runs", json={"source": "print(1)\n"},
                      headers={"Origin": "http://testserver"})
        assert sent.status_code == 503 and sent.headers["retry-after"] == "30"
        assert sent.json()["code"] == "no_upload_host"
        assert "autograd-lab upload-host" in sent.json()["detail"]
        host = _host(url, tmp_path, "h", slots=2)
        try:
            health = c.get("/healthz").json()
            assert health["status"] == "ok", health
            assert [h["name"] for h in health["uploads"]["upload_hosts"]] == [host.name]
        finally:
            host.store.close()
