"""The fork server: `python -m app.runner.fork_server_process --fd N`. Started once by the server.

A worker spends about 4 s of CPU importing torch and warming it up; thirty students pressing
Run at once on two cores then wait a minute. This process does that once, and never runs user
code: it waits on one end of a socket pair whose other end only the server holds (it has no
name anywhere: no run can connect to it, whatever uid it has) and, for each request, forks a
child that confines itself exactly as a freshly exec'd worker is confined (`sandbox/enter.py`
for the exec'd path):

    child of the fork server                         (the same layer, fresh-exec path)
    ------------------------------------------------  -----------------------------------------
    stdin/stdout from the supervisor (SCM_RIGHTS);    Popen pipes
    every other descriptor closed; own session        start_new_session
    PID 1 of a PID namespace of its own, with its     `unshare --net --pid --ipc --mount
    own /proc: as root the fork server makes the         --mount-proc --fork --kill-child`
    namespace before it forks; as another user the
    child makes it (in its user namespace) and forks
    again, the parent (outside the run's cgroup)
    passing its status on; unshare(net, ipc,
    mount); mounts private
    the worker joins the run's cgroups, lowers its    launcher: join_cgroups, nice
    priority
    expose, private /dev/shm and folder, rlimits,     launcher: enter.confine
    the run's uid for good, no_new_privs; killed
    when its parent dies (set again after the uid
    switch, which clears it)
    the worker's environment, sys.path[0] and cwd     execve with worker_env, in the run folder
    the run folder, fresh random seeds (Python,
    numpy, torch: a fork shares the parent's)
    Landlock, READY, the job                          the worker's serve()

The fork server itself is unconfined (it must create namespaces and switch uids), so it takes
nothing from anyone but the server: a request is a plan the supervisor built (`child.py`) with
three descriptors: the run's own socket (for the reply), its stdin and its stdout. It forks
only while it has one thread (checked at start: torch's thread pools are not created with one
thread each), so a child never inherits a lock held by a thread that does not exist in it. The
reply on the run's socket is the child's pid; its exit status follows when the child ends, as
`Popen.returncode` has it (-N for a signal N: never 128+N, a status a script can exit with).
When the supervisor closes a run's socket, the run is killed; when the server's end of the
pair closes (the server died), every run is killed and the fork server exits.

What a fork shares and an exec would not: the fork server's memory layout (library addresses,
the stack canary) is the same in every run. Nothing in a run parses another run's data, and
the supervisor is a separate, exec'd process.

A server that is not root has one too: each child then creates a user namespace of its own
first (the server's uid mapped to its root, as `unshare --user --map-root-user` does for the
exec'd path), so the same layers follow. Where the kernel refuses user namespaces to an
unprivileged user (some containers, a sysctl), there is no fork server: every run starts a
fresh worker, and the self-test and /healthz say why.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import resource
import selectors
import signal
import socket
import sys
import tempfile
from pathlib import Path

from . import huge_pages
from .process_group import kill_group
from .protocol import LaunchPlan, ready_line
from .sandbox import enter

__all__ = ["main"]

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID = 0x20000, 0x08000000, 0x40000000, \
    0x20000000
CLONE_NEWUSER = 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
_PR_SET_PDEATHSIG = 1
MAX_REQUEST = 256 * 1024
PROGRAMS = ("worker", "selftest")
_START_DIR = os.getcwd()  # sys.path[0] of `python -m` (the server starts this in "/")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _exit_code(status: int) -> int:
    """-N for a signal N (the wait status itself says so), else the exit status."""
    return os.waitstatus_to_exitcode(status)


# ---- the child: from a fork of this process to a confined worker ------------------------------

def _child(request: dict, stdin_fd: int, out_fd: int, pid_ns_made: bool = False) -> None:
    """Runs in the forked child and never returns. `pid_ns_made`: the fork server made the
    run's PID namespace before forking (as root), so this child is PID 1 of it already."""
    try:
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()
        plan = LaunchPlan.from_dict(request["plan"])
        if request.get("namespaces"):
            _unshare(user=os.geteuid() != 0, pid=not pid_ns_made)
            # nothing mounted from here on may reach the server's mount namespace
            _check(_libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None),
                   "making the mounts private")
            if not pid_ns_made:  # the worker must be PID 1 of the namespace just made
                worker = os.fork()
                if worker:
                    _pass_status_on(worker)
            _check(_libc.mount(b"proc", b"/proc", b"proc",
                               ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None),
                   "mounting /proc")
        # the worker (not its waiting parent) is the run: counted, limited and killed with it
        enter.prepare(plan)
        enter.confine(plan)
        if request.get("namespaces"):
            # the uid switch cleared it: the worker ends with the parent that waits for it
            _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        _fresh_process_state(plan)
        run_dir = Path(plan.run_dir)
        if request["program"] == "selftest":
            from . import selftest_worker

            code = selftest_worker.serve(run_dir, request["sandbox"])
        else:
            from . import worker

            worker.fresh_seeds()
            code = worker.serve(run_dir, request["sandbox"], prepared=True)
        sys.stdout.flush()
        os._exit(code or 0)
    except BaseException as exc:  # noqa: BLE001 - the supervisor reads this line and says which layer
        try:
            os.write(2, f"autograd-lab sandbox launcher failed: {exc}\n".encode())
        finally:
            os._exit(70)


def _unshare(user: bool, pid: bool = True) -> None:
    """New net, PID (unless made already), IPC and mount namespaces. A server that is not
    root gets them as `unshare --user --map-root-user` does: a user namespace of the run's
    own is created first and owns the others; in it the server's uid (and only it) is mapped
    to root, which may mount the run's private folders and nothing outside. The fork server
    is one thread, as CLONE_NEWUSER requires."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | (CLONE_NEWPID if pid else 0)
    if not user:
        _check(_libc.unshare(flags), "unshare")
        return
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags | CLONE_NEWUSER), "unshare (with a user namespace)")
    # setgroups must be denied before an unprivileged process may write its gid_map
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _pass_status_on(worker: int) -> None:
    """The parent in the old PID namespace: wait for the worker (PID 1 of the new one) and
    end with its status, as `unshare --fork` does. A SIGTERM for the run goes to the worker."""
    signal.signal(signal.SIGTERM, lambda *_: os.kill(worker, signal.SIGTERM))
    os.close(0)
    while True:
        try:
            _, status = os.waitpid(worker, 0)
            break
        except ChildProcessError:
            os._exit(70)
        except InterruptedError:
            continue
    code = _exit_code(status)
    if code >= 0:
        os._exit(code)
    # ended by a signal: end by the same one, as `unshare --fork` does, so the fork server's
    # wait sees a signal (an exit status of 128+N would be the script's to forge). No core
    # file of this copy of the fork server
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if -code not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(-code, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {-code})
    os.kill(os.getpid(), -code)
    os._exit(70)  # a signal that does not end a process (SIGCHLD): not the script's to send


def _fresh_process_state(plan: LaunchPlan) -> None:
    """What an exec in the run folder would have given the worker: its own environment, the
    folder as the current directory, first import path and temp dir (a fork keeps the fork
    server's), and random seeds of its own for Python (numpy's and torch's: worker.py)."""
    os.environ.clear()
    os.environ.update(plan.env)
    os.chdir(plan.run_dir)
    if sys.path and sys.path[0] == _START_DIR:
        sys.path[0] = plan.run_dir
    tempfile.tempdir = None
    random.seed()


# ---- the server loop -------------------------------------------------------------------------

class ForkServerLoop:
    def __init__(self, control: socket.socket) -> None:
        self.control = control  # the server's requests; its end closing means the server died
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.control, selectors.EVENT_READ, "request")
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through the pipe
        self.selector.register(self.wake_r, selectors.EVENT_READ, "children")
        self.runs: dict[int, socket.socket] = {}  # child pid -> the run's socket
        self.running = True
        self.pid = os.getpid()
        # as root, each run's PID namespace is made here (_fork); this is the way back
        self.own_pid_ns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC) \
            if os.geteuid() == 0 else None

    def serve_forever(self) -> None:
        while self.running:
            for key, _ in self.selector.select():
                try:
                    if key.data == "request":
                        self._request()
                    elif key.data == "children":
                        self._reap()
                    else:
                        self._hang_up(key.data)
                except Exception as exc:  # noqa: BLE001 - one bad moment must not end every run
                    print(f"autograd-lab fork server: {exc!r}", file=sys.stderr, flush=True)
        self._end_all()

    def _request(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.control, MAX_REQUEST, 3)
        except OSError:
            data, fds = b"", []
        if not data and not fds:
            self.running = False  # the server's end is closed: nobody will ask or listen
            return
        conn = socket.socket(fileno=fds[0]) if fds else None
        try:
            request = json.loads(data)
            if len(fds) != 3 or not isinstance(request, dict) or \
                    request.get("program") not in PROGRAMS:
                raise ValueError("a request is a plan, a program and three descriptors")
        except ValueError as exc:
            if conn is not None:
                self._reply(conn, {"error": str(exc)})
                conn.close()
            for fd in fds[1:]:
                os.close(fd)
            return
        made = bool(request.get("namespaces")) and self._new_pid_namespace()
        try:
            pid = os.fork()
        finally:
            if made and os.getpid() == self.pid:
                # back to its own, for the next run (and for a fork that failed)
                _check(_libc.setns(self.own_pid_ns, CLONE_NEWPID), "setns (PID)")
        if pid == 0:
            self.runs.clear()  # the child keeps nothing of the other runs
            _child(request, fds[1], fds[2], pid_ns_made=made)
        os.close(fds[1])
        os.close(fds[2])
        self.runs[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        self._reply(conn, {"pid": pid})

    def _new_pid_namespace(self) -> bool:
        """As root: the next child is made PID 1 of a PID namespace of its own by the fork
        itself, so the run needs no second fork (a waiting parent that passes its status on:
        a fork and an exit of the whole fork server, 2 ms of every small run). As another
        user the child makes it inside its user namespace, and forks once more. False where
        it cannot be made here: the child then tries, and says what refused it."""
        if self.own_pid_ns is None:
            return False
        return _libc.unshare(CLONE_NEWPID) == 0

    def _reap(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.runs.pop(pid, None)
            if conn is not None:
                self._reply(conn, {"exit": _exit_code(status)})
                self.selector.unregister(conn)
                conn.close()

    def _hang_up(self, pid: int) -> None:
        """The supervisor closed the run's socket (or sent something it should not): the run
        ends now, whatever it was doing. Only a child not yet reaped is signalled: its pid
        (and process group) cannot have been reused."""
        conn = self.runs.pop(pid, None)
        if conn is None:
            return
        kill_group(pid)
        self.selector.unregister(conn)
        conn.close()

    def _end_all(self) -> None:
        for pid in list(self.runs):
            self._hang_up(pid)

    @staticmethod
    def _reply(conn: socket.socket, message: dict) -> None:
        try:
            conn.send(json.dumps(message).encode())
        except OSError:
            pass


def _raise_stack_and_reexec(argv: list[str], keep: int) -> None:
    """The worker's main thread needs the launcher's large stack (enter.raise_stack_limit), and
    a stack limit takes effect for the main thread at exec: set it, then exec this again."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft >= enter.STACK_BYTES:
        return
    enter.raise_stack_limit()
    os.set_inheritable(keep, True)
    os.execv(sys.executable, [sys.executable, "-m", "app.runner.fork_server_process", *argv])


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--fd" or not argv[1].isdigit():
        print("usage: python -m app.runner.fork_server_process --fd N (started by the server)",
              file=sys.stderr)
        return 2
    fd = int(argv[1])
    # its SIGCHLD and SIGTERM must arrive whatever the server's launcher blocked (enter.py)
    from .sandbox.enter import unblock_signals

    unblock_signals()
    _raise_stack_and_reexec(argv, fd)
    from . import (
        selftest_worker,  # noqa: F401 - the self-test's probes fork from here too
        worker,
    )

    worker.prepare()
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"autograd-lab fork server: {threads} threads after importing torch; a fork "
              "would copy their locks but not them, so this server does not fork",
              file=sys.stderr, flush=True)
        return 70
    server = ForkServerLoop(socket.socket(fileno=fd))
    # last, once everything is loaded: each run's fork and exit then costs half (huge_pages.py)
    huge, why_not = huge_pages.collapse_own_memory()
    print(ready_line({"pid": os.getpid(), "threads": threads, "huge_pages_mb": huge,
                      "huge_pages_not": why_not}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "running", False))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
