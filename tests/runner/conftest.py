"""Fixtures for the runner's tests: one pool of sandboxed workers for a whole module (with
small limits, so that a memory bomb fails in a second), and checks that a run left nothing
behind: no process and no file outside its folder."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from app.runner import ForkServer, Policy, Pool, ResourceLimits, fork_server_supported
from app.runner.sandbox import availability, identity

TEST_LIMITS = ResourceLimits(memory_mb=512, file_size_mb=16, open_files=256, processes=32)
NORMAL = """\
import torch
lin = torch.nn.Linear(3, 2)
loss = lin(torch.randn(4, 3)).pow(2).sum()
loss.backward()
"""


def needs(*layers: str):
    """Skip (with the reason the machine gave) unless every named sandbox layer is available."""
    avail = availability()
    missing = [f"{name}: {avail[name]['detail']}" for name in layers
               if not avail[name]["available"]]
    return pytest.mark.skipif(bool(missing), reason="sandbox layer unavailable - " +
                              "; ".join(missing))


@pytest.fixture(scope="module", params=["forked", "exec"])
def pool(request):
    """Workers forked from a fork server (what a server as root uses) and freshly exec'd ones
    (everywhere else): every hostile script must meet the same sandbox either way."""
    fork_server = None
    if request.param == "forked":
        supported, why = fork_server_supported()
        if not supported:
            pytest.skip(why)
        fork_server = ForkServer().start(wait=True)
        assert fork_server.usable(), fork_server.failed
    try:
        with Pool(size=2, policy=Policy(limits=TEST_LIMITS), fork_server=fork_server) as p:
            yield p
    finally:
        if fork_server is not None:
            fork_server.stop()


@pytest.fixture(scope="module")
def outside():
    """A folder anyone may write to, outside every run folder: only the sandbox keeps a run out."""
    path = Path(tempfile.mkdtemp(prefix="autograd-lab-outside-"))
    os.chmod(path, 0o777)
    yield path
    for child in path.iterdir():
        child.unlink()
    path.rmdir()


def _same_namespace_alive(box: dict) -> bool:
    """Is the run's PID namespace still there? Its inode number is reused by the next one as
    soon as it is gone, so it is the run's only while the run's worker (its init) lives."""
    worker, pid_ns = box.get("worker_pid"), box.get("pid_ns")
    try:
        return bool(worker and pid_ns) and os.readlink(f"/proc/{worker}/ns/pid") == pid_ns
    except OSError:
        return False


def _leased_now(uid: int) -> bool:
    """Does a run hold this uid now? Once a run ends its uid is free, and a suite running beside
    this one (the loaded case of issue 19) may lease it at once: its processes are its run's,
    not leftovers of ours (a lease kills whatever its uid still ran first: identity.lease_uid)."""
    try:
        fd = os.open(identity._lock_dir() / str(uid), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops our own lock, if we took it
    return False


def leftovers(doc: dict) -> list[int]:
    """Live processes of the run: of its uid, its session (process group), its cgroup, or its
    PID namespace while that still exists."""
    box = doc.get("sandbox") or {}
    uid, session, pid_ns = box.get("uid"), box.get("session"), box.get("pid_ns")
    # the run's folder name is its own (the server's pid and its run folder's random name)
    cgroup = f"/{box['cgroup']}" if box.get("cgroup") else None
    found = identity.processes_of(uid) if uid and uid >= identity.UID_BASE and \
        not _leased_now(uid) else []
    namespace_alive = _same_namespace_alive(box)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (os.getpid(), *found):
            continue
        pid = int(entry)
        try:
            if session and os.getpgid(pid) == session:
                found.append(pid)
                continue
            if cgroup and any(line.endswith(cgroup) for line in
                              open(f"/proc/{pid}/cgroup").read().splitlines()):
                found.append(pid)
                continue
            if namespace_alive and os.readlink(f"/proc/{pid}/ns/pid") == pid_ns and \
                    pid_ns != os.readlink("/proc/self/ns/pid"):
                found.append(pid)
        except OSError:
            continue
    return found


def files_of_sandbox_uids(folder: Path) -> list[str]:
    """Entries right inside `folder` owned by a sandbox uid (only a run folder may be)."""
    found = []
    for entry in folder.iterdir():
        try:
            owner = entry.lstat().st_uid
        except OSError:
            continue
        if identity.UID_BASE <= owner < identity.UID_BASE + identity.UID_COUNT and \
                not entry.name.startswith("autograd-lab-run-"):
            found.append(str(entry))
    return found
