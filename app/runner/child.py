"""One sandboxed worker process: start it, wait until it is ready, give it one job, collect
what it leaves, make sure nothing of it survives.

    child = Child.spawn(policy)          # exec: [unshare ...] launcher -> worker, as its own uid
    child.wait_ready(60)                 # torch imported, Landlock applied (the pool waits here)
    outcome = child.execute(Job(...), files={"script.py": source}, timeout=10)

What is said to the worker is `protocol.py`'s. The supervisor enforces what no layer inside the
worker can: the wall-clock limit (SIGTERM to the worker so it reports its line, SIGKILL of
everything after a grace period), a cap on what is kept of the worker's raw stdout/stderr, and a
cap on the size of the result file it reads. Torch-free.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from app.format.schema import InvalidTrace, validate

from . import sandbox
from .fork_server import ForkServer, ForkServerUnavailable
from .process_group import kill_group
from .protocol import RESULT_FILE, Job, LaunchPlan, app_root, parse_ready, worker_env
from .sandbox import identity, namespaces
from .sandbox.cgroups import RunCgroups

__all__ = ["GRACE", "MAX_LOG", "START_TIMEOUT", "Child", "Outcome"]

GRACE = 3.0          # seconds between SIGTERM (the worker reports its line) and SIGKILL
STOP_GRACE = 1.0     # the same when a person stops the run: they are waiting
MAX_LOG = 16 * 1024  # bytes kept of the worker's raw output (its tail)
MAX_LAUNCHER_LOG = 4096  # ... and of what the launcher (unshare, enter.py) said on its own pipe
START_TIMEOUT = 120.0  # importing torch takes seconds; on a loaded machine, more
WORKER = "app.runner.worker"
# the programs the fork server runs in its children (fork_server_process.PROGRAMS)
FORKABLE = {WORKER: "worker", "app.runner.selftest_worker": "selftest"}


@dataclass
class Outcome:
    """What one run left behind, before anyone turns it into a Trace document."""
    document: dict | None
    returncode: int | None
    timed_out: bool
    elapsed: float
    log: str  # the worker's stdout and stderr, the script's once it runs: the script's words
    log_bytes: int
    too_large: bool = False
    status: dict = field(default_factory=dict)  # the sandbox as the worker reported it
    unreadable: str | None = None  # why a report that is there was not parsed
    oom_kills: int = 0  # processes of the run the kernel killed at the run's memory limit
    # ... or at the bound of all runs together, the run itself within its own limit
    oom_all_runs: bool = False
    stopped: bool = False  # someone asked for the run to end (Child.stop)
    checked: bool = False  # `document` already passed the schema (in the parsing section)
    # False: the worker ended (or was refused) before its READY line, so none of the script
    # ran: the machine's failure; `starts` workers were tried (sandboxed_trace.py)
    ready: bool = True
    starts: int = 1
    slow_start: bool = False  # not ready within the start timeout, still alive: not retried
    # what util-linux `unshare` (and the launcher before it exec'd the worker) wrote on a pipe
    # of its own that no process of the run holds: the only text here a script cannot write
    launcher_log: str = ""

    @property
    def signal(self) -> str | None:
        code = self.returncode
        if code is None:
            return None
        if code < 0:
            return _signal_name(-code)
        # never an exit status of 128+N: that is what `os._exit(137)` in a script gives too.
        # `unshare --fork` and the fork server end with the worker's signal itself
        return None


class _Drain(threading.Thread):
    """Reads the worker's stdout+stderr: spots the READY line, keeps only the tail."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True, name="autograd-lab-child-output")
        self.stream = stream
        self.ready = threading.Event()
        self.ended = threading.Event()
        self.status: dict = {}
        self.tail = bytearray()
        self.total = 0

    def run(self) -> None:
        pending = b""
        try:
            while chunk := os.read(self.stream.fileno(), 65536):
                self.total += len(chunk)
                if not self.ready.is_set():
                    pending += chunk
                    while b"\n" in pending and not self.ready.is_set():
                        line, pending = pending.split(b"\n", 1)
                        status = parse_ready(line)
                        if status is not None:
                            self.status = status
                            self.ready.set()
                        else:
                            self._keep(line + b"\n")
                    if self.ready.is_set():
                        chunk, pending = pending, b""
                    else:
                        pending, chunk = pending[-MAX_LOG:], b""
                self._keep(chunk)
        except OSError:
            pass
        finally:
            self._keep(pending if not self.ready.is_set() else b"")
            self.ended.set()

    def _keep(self, data: bytes) -> None:
        if data:
            self.tail += data
            del self.tail[:-MAX_LOG]


class _Tail(threading.Thread):
    """Reads the launcher's own stderr (not the worker's): keeps its last MAX_LAUNCHER_LOG."""

    def __init__(self, stream) -> None:
        super().__init__(daemon=True, name="autograd-lab-launcher-output")
        self.stream = stream
        self.tail = bytearray()
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            while chunk := os.read(self.stream.fileno(), 65536):
                self.tail += chunk
                del self.tail[:-MAX_LAUNCHER_LOG]
        except OSError:
            pass
        finally:
            self.ended.set()

    def text(self) -> str:
        return bytes(self.tail).decode("utf-8", errors="replace")


class Child:
    """A worker process in its own run folder, under the sandbox `policy` allows here."""

    def __init__(self, policy: sandbox.Policy, program: str = WORKER,
                 fork_server: ForkServer | None = None, plotting: bool = True,
                 warm_up: bool = True) -> None:
        self.policy = policy
        self.plotting = plotting  # an exec'd worker loads matplotlib first (preload.py)
        self.warm_up = warm_up  # and steps each common optimizer once first (preload.py)
        self.layers = sandbox.effective(policy)
        # the uid first: with none free (NoFreeUid) there is no run folder to leave behind
        self.lease = identity.lease_uid() if self.layers["uid"] else None
        self.run_dir = Path(tempfile.mkdtemp(prefix="autograd-lab-run-"))
        self.cgroups: RunCgroups | None = None
        self.proc: subprocess.Popen | None = None
        self.worker_pid: int | None = None
        self.started = time.monotonic()
        self._program = program
        self._fork_server = fork_server
        self.forked = False  # started by the fork server rather than exec'd
        self._drain: _Drain | None = None
        self._launcher: _Tail | None = None  # the launcher's stderr, exec'd workers only
        self._used = False
        self._dir_fd = -1  # the run folder as the worker sees it (its private tmpfs)
        self.stopped = False
        # stop()'s timer and the supervisor both kill: one at a time, and never a reaped pid
        self._kill_lock = threading.Lock()

    @classmethod
    def spawn(cls, policy: sandbox.Policy | None = None, program: str = WORKER,
              fork_server: ForkServer | None = None, plotting: bool = True,
              warm_up: bool = True) -> Child:
        """Start a worker: forked from `fork_server` when it is ready (and the program is one it
        serves), exec'd afresh otherwise. A fork server still starting is waited for.
        `plotting=False`: an exec'd worker does not load matplotlib (its script never imports
        it: preload.py); `warm_up=False`: nor steps an optimizer first (its script names none);
        a forked one has what the fork server loaded."""
        if fork_server is not None and fork_server.started():
            fork_server.settle()
        child = cls(policy or sandbox.Policy(), program, fork_server, plotting, warm_up)
        try:
            child._start()
        except BaseException:
            child.discard()
            raise
        return child

    @property
    def uid(self) -> int | None:
        return self.lease.uid if self.lease else None

    def _start(self) -> None:
        if self.lease:
            identity.prepare_run_dir(self.run_dir, self.lease.uid, self.lease.gid)
        if self.layers["cgroups"]:
            lim = self.policy.limits
            self.cgroups = RunCgroups.create(self.run_dir.name, lim.run_memory_mb << 20,
                                             lim.processes)
        limits = self.policy.limits.to_json() if self.layers["rlimits"] else {}
        plan = LaunchPlan(
            uid=self.uid, gid=self.uid, run_dir=str(self.run_dir),
            # mounts are only ever made inside the run's own mount namespace: made without
            # one they would cover the server's (and everyone's) /root
            expose=sandbox.paths_to_expose() if self.lease and self.layers["namespaces"] else [],
            private_folder=bool(self.layers["namespaces"] and self.layers["rlimits"]),
            private_shm=bool(self.layers["namespaces"]),
            # nothing of the machine but what the run needs (own_root.py): no host socket
            own_root=[*sandbox.paths_to_expose(app_folder_only=True), str(self.run_dir)]
            if self.layers["namespaces"] else [],
            user_namespace=bool(self.layers["namespaces"] and namespaces.in_user_namespace()),
            nice=self.policy.nice or 0,
            server_mnt_ns=os.readlink("/proc/self/ns/mnt"),
            limits=self.policy.limits.to_json(),
            # the launcher moves itself into these before anything else
            cgroups=list(self.cgroups.procs_files) if self.cgroups else [],
            env=worker_env(self.run_dir))
        # /dev/shm may be written only where it is the run's own (a mount namespace)
        worker_opts = {"landlock": self.layers["landlock"], "limits": limits,
                       "shm": self.layers["namespaces"], "seccomp": self.layers["seccomp"],
                       "own_root": bool(plan.own_root)}
        if self._fork(plan, worker_opts):
            return
        if not self.plotting:
            worker_opts["plotting"] = False
        if not self.warm_up:
            worker_opts["warm_up"] = False
        python = sys.executable
        cmd = [python, "-S", "-m", "app.runner.sandbox.enter", plan.to_json(), "--",
               python, "-m", self._program, "--serve", str(self.run_dir),
               "--sandbox", json.dumps(worker_opts)]
        if self.layers["namespaces"]:
            cmd = namespaces.unshare_prefix() + cmd
        launcher_env = {"PYTHONPATH": str(app_root()), "LANG": "C.UTF-8",
                        "PYTHONDONTWRITEBYTECODE": "1"}
        # stderr a pipe of its own: `unshare` writes there (its lines say how the worker
        # ended), and the launcher makes the worker's stderr its stdout before it exec's it
        # (enter.py), so no process of the run holds this pipe and a script cannot write on it
        self.proc = subprocess.Popen(cmd, cwd=self.run_dir, env=launcher_env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True)
        self._drain = _Drain(self.proc.stdout)
        self._drain.start()
        self._launcher = _Tail(self.proc.stderr)
        self._launcher.start()

    def _fork(self, plan: LaunchPlan, worker_opts: dict) -> bool:
        """Ask the fork server for this worker; False when it cannot (then exec afresh)."""
        program = FORKABLE.get(self._program)
        if self._fork_server is None or program is None or not self._fork_server.usable():
            return False
        request = {"plan": asdict(plan), "sandbox": worker_opts, "program": program,
                   "namespaces": self.layers["namespaces"]}
        try:
            self.proc = self._fork_server.spawn(request)
        except ForkServerUnavailable:
            return False
        self.forked = True
        self._drain = _Drain(self.proc.stdout)
        self._drain.start()
        return True

    # -- waiting ---------------------------------------------------------------------------

    def wait_ready(self, timeout: float, cancel: threading.Event | None = None) -> bool:
        """True once the worker is confined and waits for its job; False if it died, is slow,
        or `cancel` was set (the pool is stopping)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (cancel and cancel.is_set()):
            if self._drain.ready.wait(0.05):
                if self.layers["seccomp"] and self._program == WORKER and \
                        not self._drain.status.get("seccomp", {}).get("enforced"):
                    # fail closed: a worker without the filter it was asked for runs nothing
                    self._drain.tail += (f"the seccomp filter was not installed: "
                                         f"{self._drain.status.get('seccomp')}\n").encode()
                    return False
                if self.worker_pid is None:
                    self.worker_pid = self._find_worker_pid()
                    self._drain.status["session"] = self.proc.pid
                    self._drain.status["forked"] = self.forked  # from the fork server?
                    self._drain.status["worker_pid"] = self.worker_pid  # as the server sees it
                    if self.cgroups is not None and self.cgroups.folders:
                        self._drain.status["cgroup"] = self.cgroups.folders[0].name
                    try:
                        ns = os.readlink(f"/proc/{self.worker_pid}/ns/pid")
                        self._drain.status["pid_ns"] = ns
                    except OSError:
                        pass
                    try:
                        self._open_folder()
                    except PermissionError as exc:
                        # reaching a process of another uid through /proc/PID/root needs
                        # CAP_SYS_PTRACE, which root in a container lacks unless given it
                        self._drain.tail += (f"the server cannot open the worker's run folder "
                                             f"through /proc/PID/root ({exc.strerror}): give "
                                             "the server the SYS_PTRACE capability (in a "
                                             "container: cap_add, deploy/compose.yaml)\n"
                                             ).encode()
                        return False
                    except OSError:
                        return False  # it died just now: the outcome will say how
                return True
            if self.proc.poll() is not None:
                return False
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def status(self) -> dict:
        return dict(self._drain.status) if self._drain else {}

    def log_tail(self) -> str:
        """The worker's output; before its READY line (no script has run: all of it is the
        machine's), followed by what the launcher said, which then says why it never was."""
        worker = bytes(self._drain.tail).decode("utf-8", errors="replace") if self._drain else ""
        if self._launcher is not None and not self._drain.ready.is_set():
            said = self.launcher_tail()
            return f"{worker}{said}" if not worker or worker.endswith("\n") else \
                f"{worker}\n{said}"
        return worker

    def launcher_tail(self) -> str:
        return self._launcher.text() if self._launcher is not None else ""

    def _find_worker_pid(self) -> int:
        """The worker's pid as the server sees it: unshare's only child, or the process itself
        (the launcher exec'd into the worker)."""
        if not self.layers["namespaces"]:
            return self.proc.pid
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                kids = f.read().split()
            return int(kids[0]) if kids else self.proc.pid
        except OSError:
            return self.proc.pid

    def _open_folder(self) -> None:
        """Hold the run folder open as the worker sees it: with a private tmpfs, that is only
        reachable through the worker's /proc/PID/root, and stays readable (through this
        descriptor) after the worker and its namespace are gone."""
        where = self.run_dir
        if self.layers["namespaces"] and self.layers["rlimits"]:
            where = Path(f"/proc/{self.worker_pid}/root{self.run_dir}")
        self._dir_fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstatvfs(self._dir_fd)
        if where != self.run_dir:
            self._drain.status["folder_mb"] = st.f_blocks * st.f_frsize // (1024 * 1024)

    def namespaces_differ(self) -> dict[str, bool]:
        """Per namespace kind: does the worker live in one of its own (checked, not assumed)?"""
        result = {}
        for kind in namespaces.NAMESPACES:
            try:
                result[kind] = (os.readlink(f"/proc/{self.worker_pid}/ns/{kind}")
                                != os.readlink(f"/proc/self/ns/{kind}"))
            except OSError:
                result[kind] = False
        return result

    def stop(self) -> None:
        """End the run now, from any thread: SIGTERM so the worker reports the line it was on,
        then, STOP_GRACE later, SIGKILL to everything of the run. `execute` returns then.
        A worker not yet READY has no line to report (none of the script ran): everything of
        it is killed at once, rather than a SIGTERM its launcher may not act on until torch is
        imported."""
        self.stopped = True
        if self.proc is None or self.proc.poll() is not None:
            return
        if self._drain is None or not self._drain.ready.is_set():
            self._kill_everything()
            return
        _kill(self.worker_pid or self.proc.pid, signal.SIGTERM)
        timer = threading.Timer(STOP_GRACE, self._kill_everything)
        timer.daemon = True
        timer.start()

    def _kill_everything(self) -> None:
        with self._kill_lock:
            proc, cgroups = self.proc, self.cgroups
            if proc is None or proc.returncode is not None or proc.poll() is not None:
                return
            if cgroups is not None:
                cgroups.kill(timeout=1.0)
            _kill(self.worker_pid or proc.pid, signal.SIGKILL)
            kill_group(proc.pid)

    # -- the one job -------------------------------------------------------------------------

    def execute(self, job: Job, files: dict[str, str], timeout: float,
                start_timeout: float = 60.0, max_result: int | None = None) -> Outcome:
        """Hand the job over, wait at most `timeout` s, collect, clean up. Call once."""
        if self._used:
            raise RuntimeError("a worker runs exactly one job")
        self._used = True
        max_result = max_result or self.policy.limits.report_mb * 1024 * 1024
        try:
            if not self.wait_ready(start_timeout) or self._dir_fd < 0:
                slow = not self._drain.ready.is_set() and self.proc.poll() is None
                return replace(self._outcome(None, False, time.monotonic()), ready=False,
                               slow_start=slow)
            self.status_ns = self.namespaces_differ() if self.layers["namespaces"] else {}
            for name, text in files.items():
                _write_file(self._dir_fd, name, text, self.uid)
            started = time.monotonic()
            try:
                self.proc.stdin.write(replace(job, timeout=timeout).to_line())
                self.proc.stdin.close()
            except OSError:
                pass  # it died meanwhile: the outcome says how
            timed_out = self._wait(timeout)
            # only the trace worker's report is a Trace; the self-test's probe reports checks
            trace = self._program == WORKER
            document, too_large, unreadable = _read_report(self._dir_fd, RESULT_FILE,
                                                           max_result, schema=trace)
            return self._outcome(document, timed_out, started, too_large, unreadable,
                                 checked=trace)
        finally:
            self.discard()

    def _wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(timeout=timeout)
            return False
        except subprocess.TimeoutExpired:
            pass
        _kill(self.worker_pid or self.proc.pid, signal.SIGTERM)  # it reports the line it is on
        try:
            self.proc.wait(timeout=GRACE)
        except subprocess.TimeoutExpired:
            pass
        return True

    def _outcome(self, document, timed_out, started, too_large=False,
                 unreadable=None, checked: bool = True) -> Outcome:
        self._terminate()
        self._drain.ended.wait(2.0)
        if self._launcher is not None:
            self._launcher.ended.wait(2.0)
        status = self.status
        if getattr(self, "status_ns", None):
            status["namespaces"] = self.status_ns
        if self.cgroups is not None:
            status["cgroup_left"] = getattr(self, "status_cgroup_left", [])
        oom_kills = self.cgroups.oom_kills() if self.cgroups else 0
        return Outcome(document=document, returncode=self.proc.returncode, timed_out=timed_out,
                       elapsed=time.monotonic() - started, log=self.log_tail(),
                       log_bytes=self._drain.total, too_large=too_large, status=status,
                       unreadable=unreadable, oom_kills=oom_kills,
                       oom_all_runs=bool(oom_kills) and not self.cgroups.own_limit_hit(),
                       stopped=self.stopped, checked=checked and document is not None,
                       launcher_log=self.launcher_tail())

    def _terminate(self) -> None:
        with self._kill_lock:
            self._terminate_locked()

    def _terminate_locked(self) -> None:
        """Nothing of the run survives: its process group, the worker (PID 1 of its namespace,
        whose end takes every process in it along), and any process of the run's own uid."""
        if self.proc is None:
            return
        if self.proc.poll() is None and self.worker_pid and self.worker_pid != self.proc.pid:
            _kill(self.worker_pid, signal.SIGKILL)
            try:  # let `unshare` reap its child and end, rather than leave it to init
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.cgroups is not None:
            # everything the run started, wherever it detached to; what survives is reported
            self.status_cgroup_left = self.cgroups.kill()
        kill_group(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            _kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.lease:
            identity.kill_all(self.lease.uid)

    def discard(self) -> None:
        """Stop the worker if it runs, remove its folder, give its uid back. Idempotent."""
        try:
            self._terminate()
        finally:
            for stream in (self.proc.stdin, self.proc.stdout,
                           getattr(self.proc, "stderr", None)) if self.proc else ():
                if stream is None:
                    continue
                try:
                    stream.close()
                except OSError:
                    pass
            if self._dir_fd >= 0:
                os.close(self._dir_fd)
                self._dir_fd = -1
            shutil.rmtree(self.run_dir, ignore_errors=True)
            if self.cgroups is not None:
                self.cgroups.remove()
                self.cgroups = None
            if self.lease:
                self.lease.release()
                self.lease = None


def _signal_name(number: int) -> str:
    """SIGKILL, or "signal 40" for one Python has no name for (the real-time signals)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _open_in(dir_fd: int, name: str, flags: int, mode: int = 0o600) -> int:
    """Open `name` right inside the run folder, following no symlink: the run owns the folder
    and may have put a link to a secret of the server's, or a FIFO, where its result should be."""
    return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode,
                   dir_fd=dir_fd)


def _write_file(dir_fd: int, name: str, text: str, owner: int | None) -> None:
    fd = _open_in(dir_fd, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as f:
        f.write(text.encode("utf-8"))
        if owner is not None:
            os.fchown(f.fileno(), owner, owner)


# Lists and objects a report may hold: parsed, each costs the server ~100 bytes or more, and a
# script can write its own report (64 MiB of "[]," would be 22 million lists). An honest trace
# of a 200,000-node graph holds about a million.
MAX_REPORT_CONTAINERS = 2_000_000
# and strings and values: 8 million one-letter strings in one list (31 MiB, a single list)
# took 662 MB to parse. An honest report has a string per 13 bytes or more (a 15,000-node
# chain's: 11.6 MB, 907,000 strings, keys included) and a value per 11 or more (a 12-layer
# encoder's: 16): these bounds pass an honest report up to the 32 MiB cap, and refuse one of
# 4- or 2-byte items (`"a",`, `0,`)
MAX_REPORT_STRINGS = 6_000_000
MAX_REPORT_VALUES = 8_000_000
# a report whose parse would cost more than this is parsed and checked against the schema by
# one thread at a time, server-wide: six big ones at once took 1.6 GB and held the event loop
# (the GIL) for 8.7 s, and forged reports just under the old 4 MiB size threshold still cost
# 289 MB each, four at once 854 MB (issue 38). The cost is guessed from what the bounds count:
# measured, about 2 bytes a byte, 100 a list or object, 50 a string and 20 a value (a 6-layer
# encoder's 3.8 MiB report: 13 MB, guessed 15; a forged 3.9 MiB one: 78 MB, guessed 82). So an
# honest report is never held up, and a forged one costs at most this while others parse
LARGE_PARSE_BYTES = 32 * 10**6
_large_parses = threading.BoundedSemaphore(1)


def _read_report(dir_fd: int, name: str, cap: int,
                 schema: bool = True) -> tuple[dict | None, bool, str | None]:
    """The result file, read no further than `cap` bytes and parsed only when its size and
    the count of lists and objects in it are bounded: (document or None, too large?, why a
    report that is there was not parsed)."""
    try:
        fd = _open_in(dir_fd, name, os.O_RDONLY)
    except OSError:
        return None, False, None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, False, None
        data = f.read(cap + 1)
    if len(data) > cap:
        return None, True, None
    containers = data.count(b"[") + data.count(b"{")  # brackets in strings count too: a bound
    if containers > MAX_REPORT_CONTAINERS:
        return None, False, f"it holds more than {MAX_REPORT_CONTAINERS:,} lists and objects"
    strings = data.count(b'"') // 2
    if strings > MAX_REPORT_STRINGS:  # escaped quotes count too: a bound
        return None, False, f"it holds more than {MAX_REPORT_STRINGS:,} strings"
    values = data.count(b",") + containers
    if values > MAX_REPORT_VALUES:
        return None, False, f"it holds more than {MAX_REPORT_VALUES:,} values"
    cost = 2 * len(data) + 100 * containers + 50 * strings + 20 * values
    # the schema check inside the same section: a failing check may copy the document
    with _large_parses if cost > LARGE_PARSE_BYTES else contextlib.nullcontext():
        doc, problem = _parse(data)
        if doc is not None and schema:
            try:
                validate(doc, size=len(data))
            except InvalidTrace as exc:
                return None, False, str(exc)
    return doc, False, problem


def _parse(data: bytes) -> tuple[dict | None, str | None]:
    try:
        doc = json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        return None, "it is nested too deeply"
    except ValueError:
        return None, "it is not JSON"
    if not isinstance(doc, dict):
        return None, "it is not a JSON object"
    if b"\x00" not in data[:4] and not _MAYBE_SURROGATE.search(data):
        return doc, None  # UTF-8 text with no surrogate escape: nothing to replace
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # "\ud800" escapes parse into text that cannot be written out again (a page, a
        # drawing): keep the document, with such characters replaced
        doc = json.loads(json.dumps(doc, ensure_ascii=False).encode("utf-8", "replace"))
    return doc, None


# a lone surrogate in the parsed text comes from a "\ud800"-style escape, or from its UTF-8
# bytes (json decodes with surrogatepass): without either, the check below (a whole second
# encoding of the report, 0.15 s for a 48-layer encoder) has nothing to find
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _refuse_constant(name: str):
    """NaN and Infinity are not JSON: the worker writes them as strings ("NaN")."""
    raise ValueError(f"{name} is not JSON")
