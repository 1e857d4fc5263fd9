"""A worker that ends before its READY line is the machine's failure, not the script's (issue
39): none of the script ran. The run starts a fresh worker, a bounded number of times; if each
ends the same way, the run is told SandboxFailed with the last one's log, never "the script's
process ended", and every failure is counted (start_failures.py: the metrics and /healthz).

The workers here are real, exec'd in the whole sandbox, and really killed (SIGKILL to their
session, as the OOM killer or an operator would) while they still import torch."""

from __future__ import annotations

import os
import signal

import pytest
import torch

from app.runner import Policy, StartFailures, trace_in_sandbox
from app.runner.child import Child
from app.runner.sandboxed_trace import START_ATTEMPTS

from .conftest import TEST_LIMITS

SOURCE = "import torch\nw = torch.tensor([1.0, -2.0], requires_grad=True)\n" \
         "(w * w * w).sum().backward()\n"


def plain_grad() -> list[float]:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    (w * w * w).sum().backward()
    return w.grad.tolist()


def killing(first: int):
    """A `started` that kills the first `first` workers it is told of before they are ready."""
    told: list[Child] = []

    def started(child: Child) -> None:
        told.append(child)
        if len(told) <= first:
            assert not child._drain.ready.is_set()  # still importing torch: not READY yet
            os.killpg(child.proc.pid, signal.SIGKILL)
    return started, told


def test_a_worker_that_dies_before_ready_is_replaced_and_the_run_goes_on():
    started, told = killing(first=1)
    counted = StartFailures()
    doc = trace_in_sandbox(source=SOURCE, name="cube.py", timeout=60,
                           policy=Policy(limits=TEST_LIMITS), started=started,
                           start_failures=counted)
    assert doc.get("error") is None, doc["error"]
    assert len(told) == 2  # the killed one and its replacement, each told before its job
    grads = [e["grads"]["w"]["after"]["values"] for e in doc["events"]
             if e["kind"] == "backward"]
    assert grads == [plain_grad()]
    assert counted.counts() == {"pool": 0, "run": 1, "gave_up": 0}
    assert counted.report()["last"]["stage"] == "run"
    # its replacement reached READY: workers start again (/healthz is not degraded)
    assert counted.failing() is False and counted.report()["failed_in_a_row"] == 0


@pytest.mark.slow
def test_a_worker_that_keeps_dying_before_ready_is_the_sandboxs_failure_with_its_log():
    started, told = killing(first=START_ATTEMPTS)
    counted = StartFailures()
    doc = trace_in_sandbox(source=SOURCE, name="cube.py", timeout=60,
                           policy=Policy(limits=TEST_LIMITS), started=started,
                           start_failures=counted)
    error = doc["error"]
    assert len(told) == START_ATTEMPTS  # bounded: no fourth worker
    assert error["type"] == "SandboxFailed", error
    assert "script's process ended" not in error["message"]
    assert f"each of the {START_ATTEMPTS} workers tried" in error["message"]
    assert "None of the script ran" in error["message"]
    assert "log" in error  # the last worker's own output, for whoever reads the run
    assert not doc.get("events")
    assert counted.counts() == {"pool": 0, "run": START_ATTEMPTS - 1, "gave_up": 1}
    # no worker started since: /healthz says degraded
    assert counted.failing() is True
    assert counted.report()["failed_in_a_row"] == START_ATTEMPTS


def test_a_launcher_that_fails_before_ready_is_told_with_its_own_line():
    """A worker with nothing to run: a real program that exits before its READY line (here
    the launcher's Python finds no such module), as a broken installation would."""
    child = Child.spawn(Policy(limits=TEST_LIMITS), program="app.runner.no_such_worker")
    from app.runner.sandboxed_trace import trace_in

    counted = StartFailures()
    doc = trace_in(child, source=SOURCE, name="cube.py", timeout=30,
                   respawn=lambda: Child.spawn(Policy(limits=TEST_LIMITS),
                                               program="app.runner.no_such_worker"),
                   start_failures=counted)
    assert doc["error"]["type"] == "SandboxFailed", doc["error"]
    assert "No module named app.runner.no_such_worker" in doc["error"]["message"]
    assert counted.counts()["gave_up"] == 1


def test_a_worker_still_starting_when_its_time_runs_out_is_not_tried_again():
    """Slow, not dead (a machine too loaded to import torch in time): its person has waited
    the whole start timeout already, so the run is told so at once, not after three."""
    from app.runner.sandboxed_trace import trace_in

    spawned = []

    def respawn() -> Child:
        spawned.append(1)
        return Child.spawn(Policy(limits=TEST_LIMITS))

    counted = StartFailures()
    # an exec'd worker takes seconds to import torch: 0.3 s is never enough
    doc = trace_in(Child.spawn(Policy(limits=TEST_LIMITS)), source=SOURCE, name="cube.py",
                   timeout=30, respawn=respawn, start_failures=counted, start_timeout=0.3)
    assert doc["error"]["type"] == "SandboxFailed", doc["error"]
    assert "still starting" in doc["error"]["message"]
    assert spawned == []
    assert counted.counts() == {"pool": 0, "run": 0, "gave_up": 1}
