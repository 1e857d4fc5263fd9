"""An upload host runs strangers' code only (issue 23, from an attacker's read): `autograd-lab
upload-host` runs the sandbox self-test before it takes a run. Started as an ordinary user (no uid
of the run's own: a layer missing), it refuses, says which layer and what to do, and never joins the
line; started as root (every layer), it joins and runs."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest

from app.web.runs.queue import Submission
from app.web.runs.shared_queue import SharedQueue, prepare_schema
from app.web.store.postgres import PostgresRunStore
from tests.postgres import fresh_database
from tests.server import ROOT
from tests.unprivileged import as_unprivileged, can_run_unprivileged
from tests.upload_host_process import alive_hosts, queue_result, upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow,
              pytest.mark.skipif(not can_run_unprivileged(), reason="needs root to become "
                                 "nobody")]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"


def test_an_upload_host_whose_sandbox_lacks_a_layer_takes_no_runs(postgres_url, tmp_path):
    database = fresh_database(postgres_url)
    env = {**os.environ, "AUTOGRAD_LAB_DATABASE_URL": database,
           "AUTOGRAD_LAB_STORE_PATH": "/tmp/autograd-lab-unused.sqlite3",
           "AUTOGRAD_LAB_POOL_SIZE": "0", "AUTOGRAD_LAB_SELFTEST": "true"}
    done = subprocess.run(as_unprivileged([sys.executable, "-m", "app.cli", "upload-host",
                                           "--name", "weak"]),
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    said = done.stdout + done.stderr
    assert done.returncode == 2, said
    assert "sandbox is not complete" in said and "uid" in said
    assert "AUTOGRAD_LAB_SELFTEST=0" in said  # what to do on a machine one trusts
    assert "weak" not in alive_hosts(database)
    with psycopg.connect(database) as db:  # it never said it had slots
        assert db.execute("SELECT COUNT(*) FROM upload_hosts").fetchone()[0] == 0


def test_an_upload_host_whose_sandbox_holds_takes_runs(postgres_url, tmp_path):
    database = fresh_database(postgres_url)
    store = PostgresRunStore(database, pool_size=2).open()
    prepare_schema(store)
    queue = SharedQueue(store, running=1, queued=1, queue_size=2)
    try:
        with upload_host(database, tmp_path, "shared/checked-upload-host", start_timeout=180,
                           SELFTEST="true", UPLOAD_WORKERS="1"):
            run_id = queue.submit(Submission("ann", "s.py", SMALL, "cpu", 60.0))
            doc = queue_result(queue, run_id)
            assert doc["error"] is None and doc["sandbox"]["uid"] >= 1  # a uid of its own
    finally:
        queue.close()
        store.close()
