"""The launcher and the supervisor's file handling, without torch: cheap and exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.runner import sandbox
from app.runner.child import MAX_REPORT_CONTAINERS, _read_report


def test_launcher_refuses_to_mount_outside_a_namespace_of_its_own(tmp_path):
    """Started without `unshare`, a plan that asks for mounts must not touch the server's
    mount table (a tmpfs over /dev/shm or /root would hit the whole machine)."""
    before = open("/proc/self/mounts").read()
    plan = {"uid": None, "gid": None, "run_dir": str(tmp_path), "expose": [],
            "private_folder": True, "private_shm": True,
            "server_mnt_ns": os.readlink("/proc/self/ns/mnt"),
            "limits": sandbox.ResourceLimits().to_json(), "env": {}}
    done = subprocess.run([sys.executable, "-S", "-m", "app.runner.sandbox.enter",
                           json.dumps(plan), "--", "/bin/true"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(sandbox.app_root())}, timeout=30)
    assert done.returncode == 70
    assert "refusing to mount: not in a mount namespace of the run's own" in done.stderr
    assert open("/proc/self/mounts").read() == before


def test_result_is_never_read_through_a_symlink_or_a_fifo(tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"format": "stolen"}')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "trace.json").symlink_to(secret)
    os.mkfifo(tmp_path / "run" / "fifo.json")
    fd = os.open(tmp_path / "run", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert _read_report(fd, "trace.json", 1024, schema=False) == (None, False, None)
        # and it did not block
        assert _read_report(fd, "fifo.json", 1024, schema=False) == (None, False, None)
        (tmp_path / "run" / "big.json").write_text('{"a": "' + "x" * 2000 + '"}')
        assert _read_report(fd, "big.json", 1024, schema=False) == (None, True, None)
        (tmp_path / "run" / "ok.json").write_text('{"a": 1}')
        assert _read_report(fd, "ok.json", 1024, schema=False) == ({"a": 1}, False, None)
    finally:
        os.close(fd)


def test_a_report_is_not_parsed_when_it_would_cost_the_server_too_much(tmp_path):
    """What a script can write in place of its report: millions of tiny lists (GBs once
    parsed), or nesting past the parser's recursion limit."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "lists.json").write_text("[" + "[]," * (MAX_REPORT_CONTAINERS + 1) + "[]]")
    (run / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (run / "text.json").write_text("not json at all")
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        cap = 64 << 20
        doc, too_large, why = _read_report(fd, "lists.json", cap, schema=False)
        assert (doc, too_large) == (None, False) and "lists and objects" in why
        assert _read_report(fd, "deep.json", cap, schema=False) == \
            (None, False, "it is nested too deeply")
        assert _read_report(fd, "text.json", cap, schema=False) == (None, False, "it is not JSON")
    finally:
        os.close(fd)


def test_a_worker_ended_by_a_signal_python_has_no_name_for_is_explained():
    """A real-time signal (SIGRTMIN+6 = 40) once raised ValueError in the server: a 500."""
    from app.runner.child import Outcome
    from app.runner.explain import to_document
    from app.runner.protocol import Job

    outcome = Outcome(document=None, returncode=-40, timed_out=False, elapsed=0.1, log="",
                      log_bytes=0)
    doc = to_document(outcome, job=Job(script="x.py", name="x.py"), source="x = 1\n",
                      limits=sandbox.ResourceLimits())
    assert doc["error"]["type"] == "WorkerCrashed", doc["error"]
    assert "signal 40" in doc["error"]["message"]


def test_the_uid_lock_folder_is_used_only_when_it_is_the_server_s_own(tmp_path):
    """/tmp is everyone's: a folder someone else made first, or a symlink, is refused."""
    from app.runner.sandbox.identity import _lock_dir

    (tmp_path / "fresh").mkdir()
    assert _lock_dir(tmp_path / "fresh").is_dir()  # made here, ours: used
    (tmp_path / "link").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link" / "autograd-lab-uids").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RuntimeError, match="symlink"):
        _lock_dir(tmp_path / "link")
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / "autograd-lab-uids").mkdir(mode=0o777)
    os.chmod(tmp_path / "open" / "autograd-lab-uids", 0o777)
    with pytest.raises(RuntimeError, match="mode 777"):
        _lock_dir(tmp_path / "open")
    if os.geteuid() != 0:
        return  # making a folder another user owns needs root
    (tmp_path / "theirs").mkdir()
    os.chown(tmp_path / "theirs", 0, 0)
    (tmp_path / "theirs" / "autograd-lab-uids").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs" / "autograd-lab-uids", 65534, 65534)
    with pytest.raises(RuntimeError, match="owner uid 65534"):
        _lock_dir(tmp_path / "theirs")


def test_a_root_server_keeps_its_uid_locks_where_no_other_user_can_make_the_folder_first(
        tmp_path, monkeypatch):
    """Another user's /tmp/autograd-lab-uids stopped a root server from starting (issue 38):
    a root server's locks are in /run/autograd-lab, root's alone, whatever /tmp holds."""
    import tempfile

    from app.runner.sandbox import identity

    if os.geteuid() != 0:
        pytest.skip("only root leases uids")
    os.chown(tmp_path, 0, 0)
    (tmp_path / "autograd-lab-uids").mkdir(mode=0o700)
    os.chown(tmp_path / "autograd-lab-uids", 65534, 65534)  # made first by someone else
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(RuntimeError):
        identity._lock_dir(tmp_path)  # where it was: refused
    folder = identity._lock_dir()
    assert folder == identity.RUN_STATE / "autograd-lab-uids"
    st = os.stat(identity.RUN_STATE)
    assert st.st_uid == 0 and st.st_mode & 0o077 == 0


@pytest.mark.parametrize("own_folder", [True, False], ids=["server-folder", "older-layout"])
def test_cgroups_a_dead_server_left_are_swept_and_a_live_one_s_are_not(own_folder):
    from app.runner.sandbox import cgroups

    if not cgroups.available()[0]:
        pytest.skip("no writable cgroups here: " + cgroups.available()[1])
    sleeper = subprocess.Popen(["sleep", "60"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = cgroups.RunCgroups.create("sweep-test-live", 256 << 20, 8)
    backend, _ = cgroups._detect()
    # as if a server with the dead pid had made them, and left a process in one
    bases = {backend.memory, backend.pids} | ({backend.killer} if backend.killer else set())
    # each server has a folder of its own for its runs; an older one put them side by side
    server = [base / "autograd-lab" / str(dead.pid) for base in bases]
    left = [(s if own_folder else s.parent) / f"{dead.pid}-sweep-test-dead" for s in server]
    try:
        for folder in left:
            folder.mkdir(parents=True)
        with open(next(f for f in left if "pids" in str(f)) / "cgroup.procs", "w") as f:
            f.write(str(sleeper.pid))
        swept = cgroups.sweep()
        assert f"{dead.pid}-sweep-test-dead" in swept
        assert sleeper.wait(timeout=5) == -9  # what it left is killed...
        assert not any(f.exists() for f in left)  # ...and its folders are gone
        assert not any(f.exists() for f in server)
        assert all(f.exists() for f in mine.folders)  # a live server's are kept
    finally:
        sleeper.kill()
        mine.remove()
        for folder in [*left, *server]:
            if folder.exists():
                folder.rmdir()


def test_a_report_with_text_that_cannot_be_written_out_again_is_mended(tmp_path):
    """`\\ud800` parses into a string no page or drawing can encode (a 500 once); NaN is not
    JSON at all (the worker writes "NaN")."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "surrogate.json").write_text('{"torch": "\\ud800", "name": "w\\udc80"}')
    (run / "nan.json").write_text('{"norm": NaN}')
    fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        doc, too_large, why = _read_report(fd, "surrogate.json", 1 << 20, schema=False)
        assert why is None and not too_large
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # writable now
        assert doc["name"].startswith("w") and len(doc["name"]) == 2
        assert _read_report(fd, "nan.json", 1 << 20, schema=False) == \
            (None, False, "it is not JSON")
    finally:
        os.close(fd)


def test_a_worker_whose_launcher_could_not_pass_its_signal_on_is_not_called_the_scripts_exit():
    """Issue 39: runs from a batch job near their time limit ended as "The script's process
    ended (exit status 1) without writing a trace", log `unshare: sigprocmask unblock failed:
    Invalid argument`: unshare's own failure to re-raise the signal that killed the worker."""
    from app.runner.child import Outcome
    from app.runner.explain import to_document
    from app.runner.protocol import Job

    log = "unshare: sigprocmask unblock failed: Invalid argument\n"
    for elapsed, kind in ((61.0, "Timeout"), (12.0, "ResourceLimit")):
        # said on unshare's own stderr, which no process of the run holds (child.py)
        outcome = Outcome(document=None, returncode=1, timed_out=False, elapsed=elapsed,
                          log="", log_bytes=0, launcher_log=log)
        doc = to_document(outcome, job=Job(script="x.py", name="x.py", timeout=60.0),
                          source="x = 1\n", limits=sandbox.ResourceLimits())
        assert doc["error"]["type"] == kind, doc["error"]
        assert "exit status" not in doc["error"]["message"]
        # the same words in the worker's output are the script's to write: its exit status
        written = Outcome(document=None, returncode=1, timed_out=False, elapsed=elapsed,
                          log=log, log_bytes=len(log))
        doc = to_document(written, job=Job(script="x.py", name="x.py", timeout=60.0),
                          source="x = 1\n", limits=sandbox.ResourceLimits())
        assert doc["error"]["type"] == "WorkerFailed", doc["error"]
    # a worker that exited 1 by itself is still said as such
    plain = Outcome(document=None, returncode=1, timed_out=False, elapsed=1.0, log="",
                    log_bytes=0)
    doc = to_document(plain, job=Job(script="x.py", name="x.py"), source="x = 1\n",
                      limits=sandbox.ResourceLimits())
    assert doc["error"]["type"] == "WorkerFailed"
