"""A worker that ends before its READY line is the machine's failure, not the script's (issue
39): none of the script ran. The run starts a fresh worker, a bounded number of times; if each
ends the same way, the run is told SandboxFailed with the last one's log, never "the script's
process ended", and every failure is counted (start_failures.py: the metrics and /healthz).

The workers here are real, exec'd in the whole sandbox, and really killed (SIGKILL to their
session, as the OOM killer or an operator would) while they still import torch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from app.runner import Policy, StartFailures, trace_in_sandbox
from app.runner.child import Child
from app.runner.protocol import app_root
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



def test_an_execd_workers_stderr_is_not_its_launchers(tmp_path):
    """The script's stderr is the worker's output; `unshare`'s (and the launcher's) is a pipe
    of the supervisor's own: a line the script writes there is in the run's log only, so it
    cannot read as unshare's word on how the worker ended (explain.py)."""
    import subprocess
    import sys

    from app.runner.protocol import Job

    line = "unshare: sigprocmask unblock failed"
    source = f"import os\nos.write(2, b{line + chr(10)!r})\nos._exit(1)\n"
    (tmp_path / "lost.py").write_text(source)
    plain = subprocess.run([sys.executable, str(tmp_path / "lost.py")], capture_output=True,
                           timeout=60, check=False)
    child = Child.spawn(Policy(limits=TEST_LIMITS))  # exec'd: no fork server here
    assert not child.forked
    outcome = child.execute(Job(script="lost.py", name="lost.py", timeout=30),
                            {"lost.py": source}, 30)
    assert outcome.ready and outcome.returncode == plain.returncode == 1
    assert line in outcome.log and line in plain.stderr.decode()
    assert line not in outcome.launcher_log, outcome.launcher_log


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                    reason="needs root and util-linux setpriv to start a server without a "
                    "capability")
def test_a_server_without_sys_ptrace_says_so(tmp_path):
    """Root in a container lacks CAP_SYS_PTRACE unless given it, and the server cannot then
    open a worker's run folder through its /proc/PID/root (the worker is another uid): no
    worker starts (found running the image under podman). The run says which capability to
    give, not unshare's line about the worker it then killed. The CLI, started without it."""
    (tmp_path / "x.py").write_text("import torch\nw = torch.ones(3, requires_grad=True)\n"
                                   "(w * w).sum().backward()\n")
    done = subprocess.run(
        ["setpriv", "--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace", sys.executable,
         "-m", "app.cli", "trace", "x.py", "-o", "out.json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(app_root())})
    assert done.returncode == 1, done.stderr[-2000:]
    error = json.loads((tmp_path / "out.json").read_text())["error"]
    assert error["type"] == "SandboxFailed", error
    assert "SYS_PTRACE" in error["message"] and "None of the script ran" in error["message"]
