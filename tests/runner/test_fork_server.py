"""The fork server (app/runner/fork_server_process.py): its children are as fresh as an exec'd
worker (random seeds, environment, descriptors), no run can reach it, and it does not outlive the
server that started it."""

from __future__ import annotations

import os
import time

import pytest

from app.runner import ForkServer, Policy, fork_server_supported
from app.runner.child import Child
from app.runner.sandboxed_trace import trace_in

pytestmark = pytest.mark.skipif(not fork_server_supported()[0], reason=fork_server_supported()[1])


@pytest.fixture(scope="module")
def fork_server():
    z = ForkServer().start(wait=True)
    assert z.usable(), z.failed
    yield z
    z.stop()


def forked_run(fork_server: ForkServer, source: str, policy: Policy | None = None,
               timeout: float = 20) -> dict:
    child = Child.spawn(policy or Policy(), fork_server=fork_server)
    assert child.forked
    return trace_in(child, source=source, name="probe.py", timeout=timeout)


def test_each_run_draws_its_own_random_numbers(fork_server):
    source = ("import random, numpy, torch\n"
              "print(random.random(), numpy.random.rand(), torch.rand(1).item(), "
              "torch.initial_seed())\n")
    outputs = [forked_run(fork_server, source)["stdout"] for _ in range(3)]
    columns = list(zip(*(line.split() for line in outputs), strict=True))
    for values in columns:  # Python's, numpy's, torch's numbers and torch's seed
        assert len(set(values)) == 3, columns


def test_a_forked_worker_holds_no_descriptor_of_the_fork_server(fork_server):
    source = "import os\nprint(sorted(int(n) for n in os.listdir('/proc/self/fd')))\n"
    doc = forked_run(fork_server, source)
    # stdin, stdout, stderr, and the descriptor listdir itself opened
    # (no backward: the run's error is NoGraph, and its output is all this asks for)
    assert doc["error"]["type"] == "NoGraph" and len(eval(doc["stdout"])) <= 4, doc["stdout"]


ROOT_RUN_REACHES_FOR_THE_FORK_SERVER = r"""
import ctypes, os, socket
found = []
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        if int(pid) != os.getpid() and \
                b'app.runner.fork_server_process' in open(f'/proc/{pid}/cmdline', 'rb').read():
            found.append(int(pid))
    except OSError:
        pass
print('fork server pids seen:', found)
for pid in found:  # a socket named on its command line?
    for arg in open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\0'):
        if arg.startswith(b'/') and os.path.exists(arg):
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(arg)
                socket.send_fds(s, [b'{}'], [0, 1, 1])
                print('REACHED the fork server at', arg)
            except OSError:
                pass
libc = ctypes.CDLL(None, use_errno=True)
got = []
for pid in found:
    for fd in range(3, 64):
        try:  # open its descriptors through /proc
            got.append(os.open(f'/proc/{pid}/fd/{fd}', os.O_RDWR))
        except OSError:
            pass
    pidfd = libc.syscall(434, pid, 0)  # pidfd_open
    if pidfd >= 0:
        for fd in range(3, 64):
            stolen = libc.syscall(438, pidfd, fd, 0)  # pidfd_getfd
            if stolen >= 0:
                got.append(stolen)
for fd in got:
    try:
        s = socket.socket(fileno=fd)
        socket.send_fds(s, [b'{}'], [0, 1, 1])
        print('REACHED the fork server through', fd)
    except OSError:
        pass
print('reached', len(got))
"""


def test_a_run_left_as_root_cannot_reach_the_fork_server(fork_server):
    """The fork server's only way in is a socket pair the server holds: it has no name. A run
    that keeps root (no uid of its own, no namespaces: the weakest sandbox this code makes)
    finds its process but gets none of its descriptors (Landlock refuses ptrace-class access
    to processes outside the run)."""
    policy = Policy(namespaces=False, own_uid=False)
    doc = forked_run(fork_server, ROOT_RUN_REACHES_FOR_THE_FORK_SERVER, policy)
    assert doc["error"]["type"] == "NoGraph", doc["error"]  # it ran to the end: no backward
    assert "fork server pids seen: [" in doc["stdout"]
    assert "REACHED" not in doc["stdout"] and "reached 0" in doc["stdout"], doc["stdout"]
    assert doc["sandbox"]["uid"] == 0  # it really was root


def test_the_fork_server_ends_with_the_server_and_takes_its_runs_along():
    """A server that dies closes its end of the socket pair: the fork server kills what runs
    and exits, rather than live on as a root orphan."""
    z = ForkServer().start(wait=True)
    assert z.usable(), z.failed
    child = Child.spawn(Policy(), fork_server=z)
    assert child.wait_ready(30)
    proc = child.proc
    z.control.close()  # what the kernel does to a dead server's descriptors
    try:
        z.proc.wait(timeout=10)
        proc.wait(timeout=10)
    finally:
        child.discard()
        z.stop()
    assert z.proc.returncode == 0
    assert proc.returncode is not None


def test_a_forked_run_is_faster_to_start_than_an_exec_d_one(fork_server):
    """Not a timing assertion on the machine's speed: the same small script, forked and exec'd,
    in the same test, and the forked one must not be the slower (bench/classroom.py has the
    figures)."""
    source = "import torch\nw = torch.ones(2, requires_grad=True)\n(w * w).sum().backward()\n"
    t0 = time.monotonic()
    forked_run(fork_server, source)
    forked = time.monotonic() - t0
    t0 = time.monotonic()
    trace_in(Child.spawn(Policy()), source=source, name="probe.py", timeout=20)
    fresh = time.monotonic() - t0
    assert forked < fresh, (forked, fresh)


def _anonymous_kb(pid: int) -> dict[str, int]:
    """Anonymous and AnonHugePages of a process, in kB, as the kernel counts them."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("Anonymous", "AnonHugePages"):
                fields[name] = int(value.split()[0])
    return fields


def _huge_pages_possible() -> tuple[bool, str]:
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    if (major, minor) < (6, 1):
        return False, f"Linux {os.uname().release} has no MADV_COLLAPSE"
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            if "[never]" in f.read():
                return False, "transparent huge pages are turned off on this machine"
    except OSError:
        return False, "this kernel has no transparent huge pages"
    return True, ""


def test_the_fork_server_holds_its_memory_in_huge_pages_and_a_run_does_not_split_them(fork_server):
    """Most of what the fork server loaded (torch, numpy, matplotlib: its own ~240 MB) is in
    2 MB pages, so a fork copies a few hundred page-table entries, not 60,000. What the fork
    server itself writes while serving splits back into small pages once (its first run:
    about 30 MB here); a run that writes over all the rest (a full collection touches every
    object) copies what it writes in its own process, and the fork server's huge pages are as
    they were, for the next run."""
    possible, why = _huge_pages_possible()
    if not possible:
        assert fork_server.status["huge_pages_mb"] == 0 and fork_server.status["huge_pages_not"], \
            fork_server.status  # and it says why
        pytest.skip(why)
    assert fork_server.status["huge_pages_mb"] >= 100, fork_server.status
    forked_run(fork_server, "print(1)\n")  # what serving a run writes in the fork server: split
    before = _anonymous_kb(fork_server.proc.pid)
    assert before["AnonHugePages"] >= before["Anonymous"] // 2, before
    doc = forked_run(fork_server, "import gc\ngc.unfreeze()\nprint(gc.collect() >= 0)\n")
    assert doc["stdout"].strip() == "True", doc
    after = _anonymous_kb(fork_server.proc.pid)
    assert after["AnonHugePages"] >= before["AnonHugePages"] - 4 * 1024, (before, after)
