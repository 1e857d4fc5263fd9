"""The server's side of the fork server (`forkserver.py`): start it, ask it for a worker.

    zygote = Zygote().start()          # in the background at server start (about 5 s)
    proc = zygote.spawn(request)       # a ForkedProcess: pid, stdin, stdout, wait(), poll()
    zygote.stop()

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
from pathlib import Path

from .protocol import parse_ready, worker_env

__all__ = ["ForkedProcess", "Zygote", "ZygoteUnavailable", "zygote_supported"]

log = logging.getLogger("autograd_lab.runner.zygote")
START_TIMEOUT = 180.0
REPLY_TIMEOUT = 10.0


class ZygoteUnavailable(RuntimeError):
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
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
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


class Zygote:
    """One fork server process, owned by the server."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.folder: Path | None = None
        self.ready = threading.Event()
        self.failed = ""  # why it is not running, when it is not
        self.served = 0
        self._tail = bytearray()

    @property
    def path(self) -> str:
        return str(self.folder / "socket")

    def usable(self) -> bool:
        return self.ready.is_set() and self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = False) -> Zygote:
        """Start the fork server; it is ready once it has imported torch (a few seconds)."""
        self.folder = Path(tempfile.mkdtemp(prefix="autograd-lab-forkserver-"))  # mode 0700
        env = worker_env(self.folder)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.runner.forkserver", self.path], cwd=self.folder,
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        threading.Thread(target=self._read, daemon=True,
                         name="autograd-lab-forkserver-output").start()
        if wait:
            self.ready.wait(START_TIMEOUT)
        return self

    def _read(self) -> None:
        """Its output: the READY line, then anything it says (kept, the tail only)."""
        for line in iter(self.proc.stdout.readline, b""):
            if not self.ready.is_set() and parse_ready(line) is not None:
                self.ready.set()
                log.info("fork server ready (pid %d)", self.proc.pid)
                continue
            self._tail += line
            del self._tail[:-8192]
        self.proc.wait()
        if not self.failed:
            self.failed = (f"the fork server ended (exit status {self.proc.returncode}): "
                           + self._tail.decode("utf-8", "replace")[-500:])
        self.ready.clear()
        log.warning("%s; runs start fresh workers", self.failed)

    def spawn(self, request: dict) -> ForkedProcess:
        """A new child with its own stdin and stdout pipes; ZygoteUnavailable if the fork
        server is not there to ask."""
        if not self.usable():
            raise ZygoteUnavailable(self.failed or "the fork server is not ready")
        stdin_r, stdin_w = os.pipe()
        out_r, out_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.settimeout(REPLY_TIMEOUT)
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], [stdin_r, out_w])
            reply = json.loads(conn.recv(4096) or b"{}")
        except (OSError, ValueError) as exc:
            conn.close()
            for fd in (stdin_r, stdin_w, out_r, out_w):
                os.close(fd)
            raise ZygoteUnavailable(f"the fork server did not answer: {exc}") from exc
        finally:
            for fd in (stdin_r, out_w):  # the child's ends: it has them now
                try:
                    os.close(fd)
                except OSError:
                    pass
        if not isinstance(reply.get("pid"), int):
            conn.close()
            os.close(stdin_w)
            os.close(out_r)
            raise ZygoteUnavailable(f"the fork server refused: {reply.get('error')}")
        conn.settimeout(None)
        self.served += 1
        return ForkedProcess(reply["pid"], conn, os.fdopen(stdin_w, "wb"),
                             os.fdopen(out_r, "rb"))

    def stop(self) -> None:
        self.failed = self.failed or "stopped"
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def describe(self) -> str:
        if self.usable():
            return (f"runs are forked from a fork server (pid {self.proc.pid}) that imported "
                    "torch once and runs no user code; each child confines itself as an "
                    "exec'd worker would")
        return f"runs start fresh workers ({self.failed or 'the fork server is starting'})"


def zygote_supported() -> tuple[bool, str]:
    """The fork server creates namespaces and switches uids itself: it needs root."""
    if os.geteuid() != 0:
        return False, ("the fork server needs root (its children create namespaces without a "
                       "user namespace); each run starts a fresh worker")
    return True, "root"

