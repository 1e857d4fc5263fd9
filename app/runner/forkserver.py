"""The fork server: `python -m app.runner.forkserver SOCKET`. Started once by the server.

A worker spends about 4 s of CPU importing torch and warming it up; thirty students pressing
Run at once on two cores then wait a minute. This process does that once, and never runs user
code: it waits on a Unix socket (in a folder only the server's user can enter) and, for each
request, forks a child that confines itself exactly as a freshly exec'd worker is confined
(`sandbox/enter.py` for the exec'd path):

    child of the fork server                         (the same layer, fresh-exec path)
    ------------------------------------------------  -----------------------------------------
    stdin/stdout from the supervisor (SCM_RIGHTS);    Popen pipes
    every other descriptor closed; own session        start_new_session
    joins the run's cgroups, lowers its priority      launcher: join_cgroups, nice
    unshare(net, pid, ipc, mount); mounts private;    `unshare --net --pid --ipc --mount
    forks again: the worker is PID 1 of its PID          --mount-proc --fork --kill-child`
    namespace, with its own /proc, killed if its
    parent dies; the parent passes its status on
    expose, private /dev/shm and folder, rlimits,     launcher: enter.confine
    the run's uid for good, no_new_privs
    the worker's environment, fresh random seeds      execve with worker_env
    Landlock, READY, the job                          the worker's serve()

The fork server itself is unconfined (it must create namespaces and switch uids), so it takes
nothing from anyone but the server: the socket's folder is the server user's, mode 0700, and a
request is a plan the supervisor built (`child.py`). It forks only while it has one thread
(checked at start: torch's thread pools are not created with one thread each), so a child never
inherits a lock held by a thread that does not exist in it. When the supervisor's connection
ends, the run is killed. A request's reply is the pid of the child; its exit status follows
when the child ends, as `unshare --fork` reports it (128+N for a signal).

Only used where the server is root (namespaces without a user namespace); elsewhere every run
starts a fresh worker, as the self-test and the page say.
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

from .protocol import ready_line
from .sandbox import enter

__all__ = ["main"]

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID = 0x20000, 0x08000000, 0x40000000, \
    0x20000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
_PR_SET_PDEATHSIG = 1
MAX_REQUEST = 256 * 1024
PROGRAMS = ("worker", "selftest")
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # a signal N as `unshare` reports it: 128 + N


# ---- the child: from a fork of this process to a confined worker ------------------------------

def _child(request: dict, stdin_fd: int, out_fd: int) -> None:
    """Runs in the forked child and never returns."""
    try:
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        os.setsid()
        plan = request["plan"]
        enter.join_cgroups(plan.get("cgroups", []))
        if plan.get("nice"):
            os.nice(plan["nice"])
        if request.get("namespaces"):
            _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID),
                   "unshare")
            # nothing mounted from here on may reach the server's mount namespace
            _check(_libc.mount(None, b"/", None, ctypes.c_ulong(_MS_REC | _MS_PRIVATE), None),
                   "making the mounts private")
            worker = os.fork()
            if worker:
                _pass_status_on(worker)
            _check(_libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
            _check(_libc.mount(b"proc", b"/proc", b"proc",
                               ctypes.c_ulong(_MS_NOSUID | _MS_NODEV | _MS_NOEXEC), None),
                   "mounting /proc")
        enter.confine(plan)
        _fresh_process_state(plan)
        run_dir = Path(plan["run_dir"])
        if request["program"] == "selftest":
            from . import selftest_worker

            code = selftest_worker.serve(run_dir, request["sandbox"])
        else:
            from . import worker

            code = worker.serve(run_dir, request["sandbox"], prepared=True)
        sys.stdout.flush()
        os._exit(code or 0)
    except BaseException as exc:  # noqa: BLE001 - the supervisor reads this line and says which layer
        try:
            os.write(2, f"autograd-lab sandbox launcher failed: {exc}\n".encode())
        finally:
            os._exit(70)


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
    os._exit(_exit_code(status))


def _fresh_process_state(plan: dict) -> None:
    """What an exec would have given the worker: its own environment, its folder as the
    current directory and temp dir, and random seeds of its own (a fork shares the parent's)."""
    os.environ.clear()
    os.environ.update(plan["env"])
    os.chdir(plan["run_dir"])
    tempfile.tempdir = None
    random.seed()
    try:
        import numpy

        numpy.random.seed()
    except ImportError:
        pass


# ---- the server loop -------------------------------------------------------------------------

class ForkServer:
    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(128)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop through the pipe
        self.selector.register(self.wake_r, selectors.EVENT_READ, "children")
        self.runs: dict[int, socket.socket] = {}  # child pid -> its supervisor's connection

    def serve_forever(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.data == "accept":
                    self._accept()
                elif key.data == "children":
                    self._reap()
                else:
                    self._hang_up(key.fileobj, key.data)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            data, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
            request = json.loads(data)
            if len(fds) != 2 or request.get("program") not in PROGRAMS:
                raise ValueError("a request is a plan, a program and two descriptors")
        except (OSError, ValueError) as exc:
            self._reply(conn, {"error": str(exc)})
            conn.close()
            return
        pid = os.fork()
        if pid == 0:
            _child(request, fds[0], fds[1])
        for fd in fds:
            os.close(fd)
        self.runs[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        self._reply(conn, {"pid": pid})

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

    def _hang_up(self, conn: socket.socket, pid: int) -> None:
        """The supervisor closed its connection (or sent something it should not): the run
        ends now, whatever it was doing."""
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.selector.unregister(conn)
        conn.close()
        self.runs.pop(pid, None)  # reaped later, with no one to tell

    @staticmethod
    def _reply(conn: socket.socket, message: dict) -> None:
        try:
            conn.send(json.dumps(message).encode())
        except OSError:
            pass


def _raise_stack_and_reexec(argv: list[str]) -> None:
    """The worker's main thread needs the launcher's large stack (enter.raise_stack_limit), and
    a stack limit takes effect for the main thread at exec: set it, then exec this again."""
    soft, _ = resource.getrlimit(resource.RLIMIT_STACK)
    if soft == resource.RLIM_INFINITY or soft >= enter.STACK_BYTES:
        return
    enter.raise_stack_limit()
    os.execv(sys.executable, [sys.executable, "-m", "app.runner.forkserver", *argv])


def main(argv: list[str]) -> int:
    _raise_stack_and_reexec(argv)
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
    server = ForkServer(argv[0])
    print(ready_line({"pid": os.getpid(), "threads": threads}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
