"""A stop of a run whose worker is still starting ends it at once (issue 39), against a real
server. A run sent right after the server starts waits for the fork server, which is still
importing torch (seconds; tens of seconds on a loaded machine); the stop used to reach the run
only once a worker was forked after that, so DELETE answered "running" after its 10 s wait and
the run ended 15 s after the stop. Without a fork server, an exec'd worker still importing torch
is killed at once, not sent a SIGTERM its launcher acts on a second later.

Each case: the run is Stopped, its Trace shows no worker ever reported READY (the supervisor
notes a worker's pids only then) and nothing of one left in its cgroup, the stop's own answer
already says stopped, and the next run of the same person is traced as PyTorch runs it."""

from __future__ import annotations

import httpx
import pytest
import torch

from tests.server import serve

pytestmark = pytest.mark.slow

LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"
SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w * w).sum().backward()\n"


def plain_grad() -> list[float]:
    w = torch.ones(3, requires_grad=True)
    (w * w * w).sum().backward()
    return w.grad.tolist()


@pytest.mark.parametrize("forkserver", ["true", "false"])
def test_a_run_stopped_while_its_worker_starts_ends_at_once_and_the_next_run_works(
        tmp_path, forkserver):
    with serve(tmp_path, name=f"stop-while-starting-{forkserver}", POOL_SIZE="0",
               UPLOAD_WORKERS="1", FORKSERVER=forkserver, WARM_SCENARIOS="false",
               SELFTEST="false", PER_CLIENT_RUNNING="1", PER_CLIENT_QUEUED="1",
               UPLOAD_TIMEOUT="60", start_timeout=60) as base:
        client = httpx.Client(timeout=120)
        client.get(base + "/")  # a browser: its session cookie is who sent the runs
        starting = not client.get(base + "/healthz").json()["workers"]["forked"]
        sent = client.post(base + "/api/runs?wait=false", json={"source": LOOP})
        assert sent.status_code == 202, sent.text
        run_id = sent.json()["id"]

        stopped = client.delete(f"{base}/api/runs/{run_id}")
        assert stopped.status_code == 200, stopped.text
        # the DELETE waits up to 10 s for the run to end: it had ended by its answer
        assert stopped.json()["state"] == "stopped", stopped.json()
        if forkserver == "true" and starting:
            # ... and the fork server it was waiting for is still importing torch: no worker
            # could have been ready before the stop, so none was waited for
            assert client.get(base + "/healthz").json()["workers"]["forked"] is False

        doc = client.get(f"{base}/api/runs/{run_id}").json()
        assert doc["error"]["type"] == "Stopped", doc["error"]
        # never READY: the supervisor notes the worker's pids only when it reports READY
        assert not {"session", "worker_pid"} & set(doc["sandbox"]), doc["sandbox"]
        assert doc["sandbox"].get("cgroup_left", []) == []  # nothing of it survived the kill
        assert not doc.get("events")

        # the slot is free: the person's next run is run, and its gradient is PyTorch's
        after = client.post(base + "/api/runs", json={"source": SMALL}).json()
        assert after["error"] is None, after["error"]
        grads = [e["grads"]["w"]["after"]["values"] for e in after["events"]
                 if e["kind"] == "backward"]
        assert grads == [plain_grad()]
