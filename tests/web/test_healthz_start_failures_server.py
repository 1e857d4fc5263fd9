"""/healthz says "degraded" while workers fail to start, and "ok" again once one starts fine
(app/runner/start_failures.py, `failing`), against a real server whose pre-started worker is
really killed (SIGKILL, as the OOM killer would) while it still imports torch.

Exec'd workers (no fork server): a forked one is ready in a tenth of a second, before it
could be killed."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

from tests.server import serve

pytestmark = pytest.mark.slow

SMALL = "import torch\nw = torch.ones(3, requires_grad=True)\n(w * w * w).sum().backward()\n"


def children(pid: int) -> list[int]:
    """The server's own child processes: here, only its workers' launchers (`unshare`, whose
    --kill-child ends the worker with it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def plain_grad() -> list[float]:
    w = torch.ones(3, requires_grad=True)
    (w * w * w).sum().backward()
    return w.grad.tolist()


def test_healthz_is_degraded_while_workers_fail_to_start_and_ok_once_one_starts(tmp_path):
    info: dict = {}
    with serve(tmp_path, name="healthz-start-failures", info=info, POOL_SIZE="1",
               UPLOAD_WORKERS="1", FORKSERVER="false", WARM_SCENARIOS="false",
               SELFTEST="false", UPLOAD_TIMEOUT="60", start_timeout=60) as base:
        first = httpx.get(base + "/healthz", timeout=30).json()
        assert first["status"] == "ok", first
        assert first["workers"]["start_failures"]["failing"] is False

        # kill every worker the server starts, until /healthz has counted one failed start
        killing = threading.Event()
        killing.set()

        def kill_workers() -> None:
            while killing.is_set():
                for pid in children(info["pid"]):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)

        killer = threading.Thread(target=kill_workers, daemon=True)
        killer.start()
        try:
            deadline = time.monotonic() + 120
            while True:
                seen = httpx.get(base + "/healthz", timeout=30).json()
                if seen["workers"]["start_failures"]["pool"] >= 1:
                    break
                assert time.monotonic() < deadline, seen["workers"]
                time.sleep(0.1)
        finally:
            killing.clear()
            killer.join()
        # the answer that counted the failure: the pool tries again only after 1 s, and its
        # next worker then imports torch for seconds, so none can have started since
        failures = seen["workers"]["start_failures"]
        assert seen["status"] == "degraded", seen
        assert failures["failing"] is True and failures["failed_in_a_row"] >= 1
        assert failures["last"]["stage"] == "pool"

        # nothing kills workers now: the pool's next one starts, and /healthz is ok again
        deadline = time.monotonic() + 180
        while True:
            seen = httpx.get(base + "/healthz", timeout=30).json()
            if seen["status"] == "ok":
                break
            assert time.monotonic() < deadline, seen
            time.sleep(0.2)
        failures = seen["workers"]["start_failures"]
        assert failures["failing"] is False and failures["failed_in_a_row"] == 0
        assert failures["pool"] >= 1  # the count stays: it is a counter, not the state

        # and a run is traced as PyTorch runs it
        doc = httpx.post(base + "/api/runs", json={"source": SMALL}, timeout=120).json()
        assert doc["error"] is None, doc["error"]
        grads = [e["grads"]["w"]["after"]["values"] for e in doc["events"]
                 if e["kind"] == "backward"]
        assert grads == [plain_grad()]
        assert httpx.get(base + "/healthz", timeout=30).json()["status"] == "ok"
