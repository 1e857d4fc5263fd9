"""A fork server that fails at start (issue 19) is settled at once: the self-test and the pools
do not wait for it, the upload lane is sized for exec'd workers, /healthz says why, and runs
are exec'd and still answered."""

from __future__ import annotations

import threading
import time

import pytest

from app.runner import ForkServer, fork_server_supported
from app.runner.selftest import run_selftest
from app.web.runs.trace_service import TraceService
from app.web.settings import Settings

pytestmark = pytest.mark.skipif(not fork_server_supported()[0], reason=fork_server_supported()[1])


@pytest.fixture
def failing_fork_server(monkeypatch):
    # a fork server that ends at once, saying why, as one whose torch import broke would
    monkeypatch.setattr(ForkServer, "command", ("/bin/sh", "-c", "echo torch is broken; exit 3",
                                            "sh"))


def _sized_for_exec_and_still_runs(service: TraceService, why: str) -> None:
    """Two uploads at once (one per core of max_drawings=2), /healthz says `why`, and a run
    still goes, exec'd. The resize runs on a thread of its own: waited for."""
    for _ in range(300):
        if service.uploads.gate.workers == 2:
            break
        time.sleep(0.1)
    workers = service.workers()
    assert workers["uploads_at_once"] == 2 and workers["forked"] is False
    assert why in workers["detail"]
    doc = service.uploads.run("import torch\nw = torch.ones(2, requires_grad=True)\n"
                              "(w * w).sum().backward()\n", "s.py", [], "cpu")
    assert doc["error"] is None and doc["sandbox"]["forked"] is False


def test_a_failed_fork_server_is_settled_and_the_lanes_sized_for_what_works(
        failing_fork_server, tmp_path):
    service = TraceService(Settings(max_drawings=2, pool_size=1, warm_scenarios=False,
                                    store_path=str(tmp_path / "runs.sqlite3")))
    assert service.uploads.gate.workers == 6  # sized for forked workers while it starts
    service.start()
    try:
        # settled as failed, well before the 180 s a start is given
        assert service.fork_server.settle(timeout=30) is False
        failed = service.fork_server.failed
        assert service.fork_server.settled.is_set() and "exit status 3" in failed
        assert "torch is broken" in service.fork_server.failed
        _sized_for_exec_and_still_runs(service, "exit status 3")
    finally:
        service.stop()


def test_the_self_test_does_not_wait_for_a_failed_fork_server(failing_fork_server):
    fork_server = ForkServer().start()
    done: dict = {}
    try:
        # it once waited the fork server's whole start time (180 s) for a READY never coming
        worker = threading.Thread(target=lambda: done.update(report=run_selftest(fork_server)))
        worker.start()
        worker.join(120)
        assert "report" in done, "the self-test still waits for a fork server that has failed"
        report = done["report"]
        assert report["layers"]["exec"]["holds"] is True
        assert "fork server ended" in report["layers"]["exec"]["detail"]
    finally:
        fork_server.stop()


@pytest.mark.slow
def test_a_fork_server_that_dies_while_serving_leaves_the_lanes_sized_for_exec(tmp_path):
    """Before: the lane was sized once, at start, and kept six uploads at once for workers that
    were now each exec'd (seconds of CPU apiece)."""
    service = TraceService(Settings(max_drawings=2, pool_size=0, warm_scenarios=False,
                                    store_path=str(tmp_path / "runs.sqlite3")))
    service.start()
    try:
        assert service.fork_server.settle(timeout=120) is True
        assert service.uploads.gate.workers == 6
        service.fork_server.proc.kill()  # as the kernel's OOM killer or an administrator would
        _sized_for_exec_and_still_runs(service, "fork server ended")
    finally:
        service.stop()
