"""The launch plan (protocol.LaunchPlan): typed, checked key by key, the same for the exec'd
launcher and the fork server; one preparation step (cgroups, then niceness) for both; one way
to kill a process group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from app.runner import sandbox
from app.runner.process_group import kill_group
from app.runner.protocol import LaunchPlan, PlanError
from app.runner.sandbox import cgroups


def _plan(tmp_path, **changes) -> LaunchPlan:
    values = {"run_dir": str(tmp_path), "env": {"PATH": "/usr/bin:/bin"},
              "limits": sandbox.ResourceLimits().to_json(),
              "server_mnt_ns": os.readlink("/proc/self/ns/mnt")}
    return LaunchPlan(**{**values, **changes})


def test_a_plan_travels_as_json_and_comes_back_equal(tmp_path):
    plan = _plan(tmp_path, uid=61234, gid=61234, expose=["/usr"], nice=10,
                 cgroups=["/x/cgroup.procs"], private_shm=True)
    assert LaunchPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize("change, named", [
    ({"root": True}, "unknown keys: root"),
    ({"nice": "10"}, "'nice' has the wrong type"),
    ({"uid": True}, "'uid' has the wrong type"),       # a bool is not a uid
    ({"env": {"A": 1}}, "'env' has the wrong type"),
    ({"cgroups": "/x/cgroup.procs"}, "'cgroups' has the wrong type"),
])
def test_a_wrong_plan_is_refused_with_the_key_named(tmp_path, change, named):
    data = {**_plan(tmp_path).__dict__, **change}
    with pytest.raises(PlanError, match=named):
        LaunchPlan.from_dict(data)
    data = dict(_plan(tmp_path).__dict__)
    del data["run_dir"]
    with pytest.raises(PlanError, match="lacks 'run_dir'"):
        LaunchPlan.from_dict(data)


def _launch(plan_json: str, *program: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", "-m", "app.runner.sandbox.enter", plan_json,
                           "--", *program], capture_output=True, text=True, timeout=30,
                          env={"PYTHONPATH": str(sandbox.app_root())})


def test_the_launcher_refuses_a_wrong_plan_before_any_layer(tmp_path):
    done = _launch('{"run_dir": "/tmp", "env": {}, "limits": {}, "su": 0}', "/bin/true")
    assert done.returncode == 70
    assert "launcher failed: the launch plan has unknown keys: su" in done.stderr


def test_the_launcher_prepares_the_run_niced_and_in_its_cgroups(tmp_path):
    """The one preparation step: the exec'd program is in the run's cgroups and niced."""
    ok, why = cgroups.available()
    if not ok:
        pytest.skip(f"no cgroups here: {why}")
    run_cgroups = cgroups.RunCgroups.create(f"plan-test-{uuid.uuid4().hex[:8]}", 256 << 20, 64)
    try:
        plan = _plan(tmp_path, nice=7, cgroups=list(run_cgroups.procs_files))
        done = _launch(plan.to_json(), sys.executable, "-S", "-c",
                       "import os; print(os.nice(0)); print(open('/proc/self/cgroup').read())")
        assert done.returncode == 0, done.stderr
        niceness, groups = done.stdout.split("\n", 1)
        assert int(niceness) == os.nice(0) + 7
        for procs in run_cgroups.procs_files:  # .../<run's folder>/cgroup.procs
            folder = os.path.basename(os.path.dirname(procs))
            assert folder in groups, (folder, groups)
    finally:
        run_cgroups.kill(timeout=1.0)
        run_cgroups.remove()


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            state, _ppid, pgrp = stat.rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                found.append(int(entry))
    return found


def test_kill_group_ends_every_process_of_a_group_and_a_gone_one_is_no_error():
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 60 & sleep 60 & wait"],
                              start_new_session=True)
    time.sleep(0.3)
    assert len(_group(leader.pid)) >= 3  # the shell and its two sleeps
    assert kill_group(leader.pid) is True
    leader.wait(timeout=10)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _group(leader.pid):
        time.sleep(0.05)
    assert _group(leader.pid) == []
    # a group whose every process has ended and been reaped: said, not raised
    alone = subprocess.Popen(["/bin/true"], start_new_session=True)
    alone.wait(timeout=10)
    assert kill_group(alone.pid) is False
    assert kill_group(alone.pid, signal.SIGTERM) is False
