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
    queue = SharedQueue(store, running=1, queued=1, queue_size=10)
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
