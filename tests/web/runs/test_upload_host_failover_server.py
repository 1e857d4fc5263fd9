"""An upload host that dies mid-run (issue 23): SIGKILL of one `autograd-lab upload-host`'s whole
process group while it runs a script → the run is retried on the other upload host and completes
there, exactly once more; nothing of the killed upload host is left running (its run's processes,
its cgroups); a run whose upload host dies twice is failed with a message that says so."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest

from app.web.runs.queue import Submission
from app.web.runs.shared_queue import SharedQueue
from app.web.store.postgres import PostgresRunStore
from tests.postgres import fresh_database
from tests.upload_host_process import upload_host

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

# long enough to be killed in, short enough to finish on the second upload host
SLOW = ("import time\nimport torch\ntime.sleep(3)\nw = torch.ones(3, requires_grad=True)\n"
        "(w * w).sum().backward()\n")
LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"


def _row(database: str, run_id: str) -> dict:
    with psycopg.connect(database) as db:
        cur = db.execute("SELECT state, host, attempts, error_type FROM uploads WHERE id = %s",
                         (run_id,))
        return dict(zip([c.name for c in cur.description], cur.fetchone(), strict=True))


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _processes_of(worker_pid: int) -> dict[int, str]:
    """The upload host's descendants and every process in its runs' cgroups: pid -> start time
    (so that a pid used again later is not taken for the same process)."""
    parents: dict[int, int] = {}
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cgroup = Path(f"/proc/{entry}/cgroup").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        if f"/autograd-lab/{worker_pid}/" in cgroup:
            found[int(entry)] = fields[19]
    for pid in list(parents):
        ancestor = pid
        while ancestor > 1:
            if ancestor == worker_pid:
                found[pid] = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
                break
            ancestor = parents.get(ancestor, 0)
    return found


def _alive(pid: int, started: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started
    except (OSError, IndexError):
        return False


def _cgroup_folders(worker_pid: int) -> list[Path]:
    roots = [Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/memory"),
             Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")]
    return [p for root in roots if root.is_dir()
            for p in root.glob(f"**/autograd-lab/{worker_pid}")]


@pytest.fixture
def line(tmp_path, postgres_url):
    database = fresh_database(postgres_url)
    store = PostgresRunStore(database, pool_size=4).open()
    # runs sent before any upload host is up wait for one (the operator's choice): the tests
    # start the hosts after
    queue = SharedQueue(store, running=1, queued=2, queue_size=4, wait_for_upload_hosts=True)
    yield database, store, queue
    queue.close()
    store.close()


def test_a_run_whose_upload_host_is_killed_completes_on_the_other_and_nothing_is_left(line,
                                                                                 tmp_path):
    database, store, queue = line
    with upload_host(database, tmp_path, "failover/upload-host-1", UPLOAD_WORKERS="1",
                       UPLOAD_TIMEOUT="60") as one, \
            upload_host(database, tmp_path, "failover/upload-host-2", UPLOAD_WORKERS="1",
                          UPLOAD_TIMEOUT="60") as two:
        run_id = queue.submit(Submission("ann", "slow.py", SLOW, "cpu", 60.0))
        _wait(lambda: _row(database, run_id)["state"] == "running", 60, "never started")
        time.sleep(1.0)  # in its sleep, on one upload host
        first = _row(database, run_id)["host"]
        killed, other = (one, "failover/upload-host-2") if first == "failover/upload-host-1" else \
            (two, "failover/upload-host-1")
        left = _processes_of(killed.pid)
        assert len(left) >= 2  # the upload host and at least its run
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(10)

        _wait(lambda: _row(database, run_id)["state"] == "done", 90, "not completed elsewhere")
        row = _row(database, run_id)
        assert row["host"] == other and row["attempts"] == 2, row
        doc = store.get(run_id)
        assert doc["error"] is None and doc["params"]["w"]["uses"] == {"0": 2}
        assert len(store) == 1  # exactly one stored Trace
        _wait(lambda: not [p for p, t in left.items() if _alive(p, t)], 20,
              f"the killed upload host's processes live on: {left}")
        _wait(lambda: not _cgroup_folders(killed.pid), 20, "its cgroups are left")


def test_a_run_whose_upload_host_dies_twice_is_failed_and_says_why(line, tmp_path):
    database, store, queue = line
    run_id = queue.submit(Submission("bob", "loop.py", LOOP, "cpu", 60.0))
    # the first upload host takes it and dies; the second sees the first is dead, puts the run
    # back in line, takes it, and dies too
    for n in (1, 2):
        with upload_host(database, tmp_path, f"failover/doomed-{n}", UPLOAD_WORKERS="1",
                           UPLOAD_TIMEOUT="60") as doomed:
            _wait(lambda n=n: _row(database, run_id)["state"] == "running" and
                  _row(database, run_id)["attempts"] == n, 60, f"attempt {n} never started")
            os.killpg(doomed.pid, signal.SIGKILL)
            doomed.wait(10)
    with upload_host(database, tmp_path, "failover/last", UPLOAD_WORKERS="1",
                       UPLOAD_TIMEOUT="60"):
        _wait(lambda: _row(database, run_id)["state"] == "failed", 60, "not failed")
    row = _row(database, run_id)
    assert row["attempts"] == 2 and row["error_type"] == "UploadHostLost", row
    assert "stopped twice" in store.get(run_id)["error"]["message"]
