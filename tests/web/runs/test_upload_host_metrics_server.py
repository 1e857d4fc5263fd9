"""An upload host's own /metrics (issue 39): in the shared mode no web process runs an upload,
so only the upload hosts can count them. A real `autograd-lab upload-host` with
AUTOGRAD_LAB_UPLOAD_HOST_METRICS_PORT set runs real uploads from a real PostgreSQL line; its
metrics are scraped over HTTP and read with the Prometheus client library's own parser."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from app.web.runs.queue import Submission
from app.web.runs.shared_queue import SharedQueue
from app.web.store.postgres import PostgresRunStore
from tests.metrics_scrape import scrape, value
from tests.postgres import fresh_database
from tests.server import free_port
from tests.upload_host_process import queue_result, upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w).sum().backward()\n"
RAISES = "class MyOwnError(Exception):\n    pass\nraise MyOwnError('on purpose')\n"


def listening_on(port: int) -> set[str]:
    """The local addresses (hex, as the kernel writes them) of TCP sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_an_upload_hosts_runs_are_counted_on_its_own_loopback_listener(tmp_path, postgres_url):
    database = fresh_database(postgres_url)
    store = PostgresRunStore(database, pool_size=4).open()
    queue = SharedQueue(store, running=2, queued=2, queue_size=4, wait_for_upload_hosts=True)
    port = free_port()
    try:
        with upload_host(database, tmp_path, "metrics/upload-host", UPLOAD_WORKERS="1",
                         UPLOAD_HOST_METRICS_PORT=str(port)):
            url = f"http://127.0.0.1:{port}/metrics"
            assert listening_on(port) == {"0100007F"}  # 127.0.0.1 only
            # a page whose name was made to resolve to 127.0.0.1 (DNS rebinding) reads nothing
            rebound = httpx.get(url, headers={"Host": f"evil.example:{port}"}, timeout=10)
            assert rebound.status_code == 400 and "autograd_lab" not in rebound.text
            assert httpx.get(url, headers={"Host": f"localhost:{port}"},
                             timeout=10).status_code == 200
            before = scrape(httpx.get(url, timeout=10).text)
            assert value(before, "autograd_lab_upload_host_slots") == 1
            done = queue.submit(Submission("ann", "small.py", SMALL, "cpu", 60.0))
            assert queue_result(queue, done).get("error") is None
            raised = queue.submit(Submission("ann", "raises.py", RAISES, "cpu", 60.0))
            error = queue_result(queue, raised)["error"]
            # the exception plain Python raises for the same script
            plain = subprocess.run([sys.executable, "-c", RAISES], capture_output=True,
                                   text=True, timeout=60)
            assert plain.stderr.strip().splitlines()[-1].startswith(
                f"{error['type']}: ")
            after = scrape(httpx.get(url, timeout=10).text)
    finally:
        queue.close()
        store.close()
    runs = "autograd_lab_runs_total"
    assert value(after, runs, lane="upload", outcome="done") - \
        value(before, runs, lane="upload", outcome="done") == 1
    # the script's own exception class is never a label value
    assert value(after, runs, lane="upload", outcome="ScriptError") - \
        value(before, runs, lane="upload", outcome="ScriptError") == 1
    for histogram in ("autograd_lab_run_queue_wait_seconds_count",
                      "autograd_lab_run_duration_seconds_count"):
        assert value(after, histogram, lane="upload") - \
            value(before, histogram, lane="upload") == 2
    assert value(after, "autograd_lab_upload_host_runs") == 0  # both ended
    for stage in ("pool", "run", "gave_up"):
        assert ("autograd_lab_worker_start_failures_total", (("stage", stage),)) in after
    assert value(after, "autograd_lab_db_pool_max") >= 1


def test_without_the_setting_an_upload_host_listens_on_no_port(tmp_path, postgres_url):
    database = fresh_database(postgres_url)
    with upload_host(database, tmp_path, "metrics/no-listener", UPLOAD_WORKERS="1") as proc:
        sockets = set()
        for fd in os.listdir(f"/proc/{proc.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{proc.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                sockets.add(target[len("socket:["):-1])
        assert sockets  # its database connections at least: the look is a real one
        listening = [line.split()[1] for table in ("/proc/net/tcp", "/proc/net/tcp6")
                     for line in open(table).read().splitlines()[1:]
                     if line.split()[3] == "0A" and line.split()[9] in sockets]
        assert listening == []
