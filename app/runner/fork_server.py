"""The server's side of the fork server (`fork_server_process.py`): start it, ask it for a worker.

    fork_server = ForkServer().start()          # in the background at server start (about 5 s)
    proc = fork_server.spawn(request)       # a ForkedProcess: pid, stdin, stdout, wait(), poll()
    fork_server.stop()

`Child` (child.py) uses a ready fork server when it is given one, and exec's a fresh worker
otherwise: the same plan, the same layers, the same supervision. Torch-free.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .process_group import kill_group
from .protocol import parse_ready, worker_env
from .sandbox import namespaces

__all__ = ["ForkedProcess", "ForkServer", "ForkServerUnavailable", "fork_server_supported"]

log = logging.getLogger("autograd_lab.runner.fork_server")
START_TIMEOUT = 180.0
REPLY_TIMEOUT = 10.0


class ForkServerUnavailable(RuntimeError):
    """The fork server is not running (or did not answer): start a fresh worker instead."""


class ForkedProcess:
    """A child of the fork server, seen through the supervisor's connection: what `Child`
    needs of a subprocess.Popen (pid, stdin, stdout, poll, wait, returncode)."""

    def __init__(self, pid: int, conn: socket.socket, stdin, stdout) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._conn = conn
        self._done = threading.Event()
        threading.Thread(target=self._watch, daemon=True,
                         name="autograd-lab-forked-process").start()

    def _watch(self) -> None:
        code = None
        try:
            data = self._conn.recv(4096)
            if data:
                code = json.loads(data).get("exit")
        except (OSError, ValueError):
            pass
        if not isinstance(code, int):
            # the fork server went away before it could say: make sure the run ends
            kill_group(self.pid)
            code = -signal.SIGKILL
        self.returncode = code
        self._conn.close()
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired("forked worker", timeout)
        return self.returncode


class ForkServer:
    """One fork server process, owned by the server. It is reached through one end of a socket
    pair that only the server holds: it has no name a run could connect to."""

    # what starts it (a test starts one that fails, to see the server go on without it)
    command: tuple[str, ...] = (sys.executable, "-m", "app.runner.fork_server_process")

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.control: socket.socket | None = None
        self.home: Path | None = None
        self.ready = threading.Event()
        # ready, or known not to be: what waits for the fork server waits for this (a fork
        # server that fails at start must not keep the self-test and the pools waiting)
        self.settled = threading.Event()
        self.ended = threading.Event()  # it has ended (or never started): runs are exec'd
        self._started: float | None = None
        self.failed = ""  # why it is not running, when it is not
        self.served = 0
        # what it said when ready (its pid, huge pages: fork_server_process.py)
        self.status: dict = {}
        self._tail = bytearray()
        self._send_lock = threading.Lock()  # one request at a time on the control socket

    def usable(self) -> bool:
        return self.ready.is_set() and self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = False) -> ForkServer:
        """Start the fork server; it is ready once it has imported torch (a few seconds)."""
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # its own home (matplotlib's font cache goes there): the server's user's, mode 0700
        self.home = Path(tempfile.mkdtemp(prefix="autograd-lab-fork-server-"))
        self._started = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [*self.command, "--fd", str(theirs.fileno())],
                cwd="/", env=worker_env(self.home), pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True)
        except OSError as exc:
            self.failed = f"the fork server could not be started: {exc}"
            self.ended.set()
            self.settled.set()
            log.warning("%s; runs start fresh workers", self.failed)
            return self
        finally:
            theirs.close()
        threading.Thread(target=self._read, daemon=True,
                         name="autograd-lab-fork-server-output").start()
        if wait:
            self.settle()
        return self

    def settle(self, timeout: float = START_TIMEOUT,
               cancel: threading.Event | None = None) -> bool:
        """Wait until the fork server is ready or known to have failed (or `cancel` is set);
        True when it is usable. Whoever would start a worker waits here first: an exec'd
        worker started meanwhile imports torch on its own, seconds of CPU the start-up
        cannot spare."""
        deadline = time.monotonic() + timeout
        while not self.settled.wait(0.1 if cancel is not None else min(timeout, 1.0)):
            if self._started is not None and time.monotonic() - self._started > START_TIMEOUT:
                self._give_up()  # hung at start: settled once, not waited for by every run
                break
            if (cancel is not None and cancel.is_set()) or time.monotonic() > deadline:
                break
        return self.usable()

    def _give_up(self) -> None:
        self.failed = self.failed or (f"the fork server was not ready within {START_TIMEOUT:g} "
                                      "s of its start")
        self.settled.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def _read(self) -> None:
        """Its output: the READY line, then anything it says (kept, the tail only)."""
        for line in iter(self.proc.stdout.readline, b""):
            status = None if self.ready.is_set() else parse_ready(line)
            if status is not None:
                self.status = status
                self.ready.set()
                self.settled.set()
                log.info("fork server ready (pid %d); %s", self.proc.pid,
                         f"{status.get('huge_pages_mb')} MB of it in huge pages"
                         if status.get("huge_pages_mb") else
                         f"no huge pages: {status.get('huge_pages_not')}")
                continue
            self._tail += line
            del self._tail[:-8192]
        self.proc.wait()
        if not self.failed:
            self.failed = (f"the fork server ended (exit status {self.proc.returncode}): "
                           + self._tail.decode("utf-8", "replace")[-500:])
        self.ready.clear()
        self.ended.set()
        self.settled.set()
        log.warning("%s; runs start fresh workers", self.failed)

    def spawn(self, request: dict) -> ForkedProcess:
        """A new child with its own stdin and stdout pipes; ForkServerUnavailable if the fork
        server is not there to ask."""
        if not self.usable():
            raise ForkServerUnavailable(self.failed or "the fork server is not ready")
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            mine.settimeout(REPLY_TIMEOUT)
            with self._send_lock:
                socket.send_fds(self.control, [json.dumps(request).encode()],
                                [theirs.fileno(), stdin_r, out_w])
            reply = json.loads(mine.recv(4096) or b"{}")
        except (OSError, ValueError) as exc:
            mine.close()
            for fd in (stdin_w, out_r):
                os.close(fd)
            raise ForkServerUnavailable(f"the fork server did not answer: {exc}") from exc
        finally:
            theirs.close()  # the fork server has its own copies of these three now
            for fd in (stdin_r, out_w):
                os.close(fd)
        if not isinstance(reply.get("pid"), int):
            mine.close()
            os.close(stdin_w)
            os.close(out_r)
            raise ForkServerUnavailable(f"the fork server refused: {reply.get('error')}")
        mine.settimeout(None)
        self.served += 1
        return ForkedProcess(reply["pid"], mine, os.fdopen(stdin_w, "wb"),
                             os.fdopen(out_r, "rb"))

    def started(self) -> bool:
        return self.proc is not None or self.settled.is_set()

    def stop(self) -> None:
        self.failed = self.failed or "stopped"
        self.settled.set()
        if self.control is not None:
            self.control.close()  # the fork server kills what runs and ends
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)

    def describe(self) -> str:
        if self.usable():
            return (f"runs are forked from a fork server (pid {self.proc.pid}) that imported "
                    "torch once and runs no user code; each child confines itself as an "
                    "exec'd worker would")
        return f"runs start fresh workers ({self.failed or 'the fork server is starting'})"


def fork_server_supported() -> tuple[bool, str]:
    """Root's fork server makes its children's namespaces directly; another user's makes each
    child a user namespace of its own first, so it needs the kernel to allow that (the same
    check as the exec'd path's `unshare --user`)."""
    if os.geteuid() == 0:
        return True, "root"
    ok, why = namespaces.check()
    if not ok:
        return False, ("the server is not root and user namespaces are not available here ("
                       + why + "); each run starts a fresh worker")
    return True, "not root: each child enters a user namespace of its own"
