"""An upload host runs strangers' code only (issue 23, from an attacker's read): `autograd-lab
upload-host` runs the sandbox self-test before it takes a run. Started as an ordinary user (no uid
of the run's own: a layer missing), it refuses, says which layer and what to do, and never joins the
line; started as root (every layer), it joins and runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

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
    """It says which layer and what to do, then waits (issue 39: it exited, and compose's
    `restart: always` made a loop of self-tests); stopped, it ends with 2."""
    database = fresh_database(postgres_url)
    env = {**os.environ, "AUTOGRAD_LAB_DATABASE_URL": database,
           "AUTOGRAD_LAB_STORE_PATH": "/tmp/autograd-lab-unused.sqlite3",
           "AUTOGRAD_LAB_POOL_SIZE": "0", "AUTOGRAD_LAB_SELFTEST": "true"}
    log = tmp_path / "weak.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(as_unprivileged([sys.executable, "-m", "app.cli", "upload-host",
                                                 "--name", "weak"]),
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while "sandbox is not complete" not in log.read_text():
            assert proc.poll() is None, log.read_text()  # it waits; it does not exit
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        time.sleep(2)
        assert proc.poll() is None, log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    said = log.read_text()
    assert proc.returncode == 2, said
    assert "uid" in said and "tries again" in said
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


def test_a_shared_web_process_takes_uploads_whatever_its_own_sandbox(postgres_url, tmp_path):
    """Issue 39: in the shared mode a web process runs no upload, yet its own self-test decided
    who may send one: a web container without namespaces answered a token holder's upload
    from another host with 403 sandbox_incomplete. Its self-test is off here (so its own
    sandbox counts as not whole, as /healthz says); the request comes through a trusted proxy
    from another host; the upload host runs it."""
    import httpx

    from tests.server import serve

    database = fresh_database(postgres_url)
    with serve(tmp_path, name="shared/web-without-sandbox", DATABASE_URL=database,
               TOKEN="s3cret", SELFTEST="false", WARM_SCENARIOS="false", POOL_SIZE="0",
               FORWARDED_ALLOW_IPS="127.0.0.1") as base, \
            upload_host(database, tmp_path, "shared/host-for-sandboxless-web",
                        UPLOAD_WORKERS="1"):
        assert httpx.get(base + "/healthz", timeout=30).json()["sandbox"]["ok"] is False
        ran = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120,
                         headers={"Authorization": "Bearer s3cret",
                                  "X-Forwarded-For": "198.51.100.7"})
        assert ran.status_code == 200, ran.text
        assert ran.json()["error"] is None and ran.json()["params"]["w"]["uses"] == {"0": 2}
        # without the token it is still refused for the token, not for the sandbox
        refused = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=60,
                             headers={"X-Forwarded-For": "198.51.100.7"})
        assert refused.status_code == 401
