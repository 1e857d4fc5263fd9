"""A stand-in worker for the self-test: `python -m app.runner.selftest_worker --serve RUN_DIR`.

It speaks the worker's protocol (`protocol.py`: confine, READY line, one JSON job on stdin,
RUN_DIR/trace.json)
but, instead of tracing a script, tries the hostile things named in the job and reports, for
each, whether the sandbox stopped it. No torch, so a probe starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .protocol import MAX_JOB_LINE, Job, app_root, ready_line, write_result
from .sandbox.confine import apply_landlock, apply_seccomp, drop_stdin
from .sandbox.rlimits import MIB, ResourceLimits, apply_job


def _refused(action) -> tuple[bool, str]:
    """(held, detail): held when the action raised OSError/MemoryError."""
    try:
        result = action()
    except (OSError, MemoryError, subprocess.SubprocessError) as exc:
        return True, f"refused: {type(exc).__name__}: {exc}"
    return False, f"allowed ({result!r})"[:300]


def _connect(port: int):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"


def _write(path: Path, size: int):
    with open(path, "wb") as f:
        f.write(b"x" * size)
    return f"wrote {size} bytes to {path}"


def _fill(folder: Path, total_mb: int):
    try:
        for i in range(total_mb // 8):
            _write(folder / f"fill-{i}", 8 * MIB)
    finally:
        for path in folder.glob("fill-*"):
            path.unlink()  # room for the report
    return f"wrote {total_mb} MiB"


def _fork_many(count: int):
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
    return f"{len(pids)} processes"


def _touch_in_children(count: int, mb: int):
    """`count` processes each touching `mb` MiB: together past the run's memory limit. Each
    child keeps its pages until every child has touched its own (or died): all of them are
    resident at once, however the machine's load orders them, so a limit that holds is
    certain to be reached."""
    touched_r, touched_w = os.pipe()
    release_r, release_w = os.pipe()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(touched_r)
            os.close(release_w)
            block = bytearray(mb * MIB)
            for i in range(0, len(block), 4096):
                block[i] = 1
            os.write(touched_w, b"t")
            os.close(touched_w)  # the parent's EOF: every child has touched its pages or died
            os.read(release_r, 1)  # EOF once the parent has heard from everyone
            os._exit(0)
        pids.append(pid)
    os.close(touched_w)
    os.close(release_r)
    heard = 0
    while heard < count and os.read(touched_r, 1):  # EOF: every child touched or died
        heard += 1
    os.close(release_w)
    os.close(touched_r)
    killed = 0
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    if killed:
        raise MemoryError(f"{killed} of {count} processes of {mb} MiB were killed")
    return f"{count} processes of {mb} MiB each were resident at once and ran to the end"


_SYSCALLS = {"unshare": 272, "add_key": 248, "bpf": 321}  # x86_64


def _syscall(name: str, *args):
    """The raw call (no Python wrapper exists for these): OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYSCALLS[name], *args) == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")
    return f"{name} was allowed"


def _connect_unix(path: str):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(2)
        s.connect(path)
        return f"connected to {path}: {s.recv(64)!r}"


def _listing(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _open_many(count: int):
    files = [open(os.devnull) for _ in range(count)]
    return f"{len(files)} files open"


def _detach_and_sleep():
    if os.fork() == 0:
        os.setsid()
        time.sleep(600)
        os._exit(0)
    time.sleep(600)


def run_checks(job: dict, run_dir: Path, limits: ResourceLimits) -> dict:
    app_file = app_root() / "app" / "__init__.py"
    checks = {
        "read_passwd": lambda: _refused(lambda: open("/etc/passwd").read(64)),
        "read_app": lambda: _refused(lambda: app_file.read_text()[:64]),
        "write_outside": lambda: _refused(
            lambda: _write(Path(job["outside_dir"]) / "escaped", 10)),
        "exec": lambda: _refused(lambda: subprocess.run(["/bin/true"], check=True).returncode),
        "connect": lambda: _refused(lambda: _connect(job["port"])),
        "pid": lambda: (os.getpid() == 1,
                        f"pid {os.getpid()}, {sum(p.isdigit() for p in os.listdir('/proc'))} "
                        "processes visible"),
        "uid": lambda: (os.getuid() != 0 and os.geteuid() != 0, f"uid {os.getuid()}"),
        "env": lambda: (True, json.dumps(sorted(os.environ))),
        "memory": lambda: _refused(lambda: len(bytearray((limits.memory_mb + 256) * MIB))),
        "open_files": lambda: _refused(lambda: _open_many(limits.open_files + 64)),
        "file_size": lambda: _refused(
            lambda: _write(run_dir / "big", (limits.file_size_mb + 1) * MIB)),
        "folder_size": lambda: _refused(lambda: _fill(run_dir, limits.folder_mb + 64)),
        "processes": lambda: _refused(lambda: _fork_many(limits.processes + 8)),
        # the job says how much: the probe's rlimits (and so its ResourceLimits) may be off
        "run_memory": lambda: _refused(lambda: _touch_in_children(4, job["child_mb"])),
        "output": lambda: (True, _flood(10 * MIB)),
        # seccomp: each of these returns -1 with EPERM (or raises) when refused
        "new_user_namespace": lambda: _refused(lambda: _syscall("unshare", 0x10000000)),
        "keyring": lambda: _refused(lambda: _syscall(
            "add_key", b"user", b"autograd-lab-probe", b"left for the next run", 20,
            ctypes.c_int(-4))),  # the user keyring, which outlives the run
        "netlink_socket": lambda: _refused(
            lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW).close()),
        "bpf": lambda: _refused(lambda: _syscall("bpf", 0, 0, 0)),
        # a root of its own: a socket the server listens on by path, and every run's cgroup
        "host_socket": lambda: _refused(lambda: _connect_unix(job["unix_socket"])),
        "cgroup_tree": lambda: (not _listing("/sys/fs/cgroup"),
                                f"/sys/fs/cgroup shows {_listing('/sys/fs/cgroup')[:6]}"),
    }
    results = {}
    for name in job["checks"]:
        held, detail = checks[name]()
        results[name] = {"held": bool(held), "detail": detail}
    if job.get("detach_and_sleep"):
        _detach_and_sleep()
    return results


def _flood(size: int) -> str:
    written = 0
    while written < size:
        written += os.write(1, b"y" * min(65536, size - written))
    return f"wrote {written} bytes to stdout"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", required=True)
    parser.add_argument("--sandbox", default="{}")
    args = parser.parse_args()
    return serve(Path(args.serve), json.loads(args.sandbox))


def serve(run_dir: Path, opts: dict) -> int:
    """Confine, READY, one job of checks, the report (also called in a fork server's child)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))  # the wall clock: stop at once
    status = {"pid": os.getpid(), "uid": os.getuid()}
    if opts.get("seccomp"):
        status["seccomp"] = apply_seccomp()
    if opts.get("landlock"):
        status["landlock"] = apply_landlock(run_dir, app_root() / "app",
                                            private_shm=bool(opts.get("shm")),
                                            own_root=bool(opts.get("own_root")))
    print(ready_line(status), flush=True)
    job = Job.from_line(sys.stdin.buffer.readline(MAX_JOB_LINE))
    drop_stdin()
    limits = ResourceLimits.from_json(opts["limits"]) if opts.get("limits") else ResourceLimits()
    if opts.get("limits"):
        apply_job(limits, job.timeout)
    main_pid = os.getpid()
    results = run_checks(job.extra, run_dir, limits)
    if os.getpid() != main_pid:
        os._exit(0)

    def write(path: Path) -> None:
        with open(path, "w") as f:
            json.dump({"checks": results, "pad": "p" * job.extra.get("pad", 0)}, f)

    write_result(run_dir, write)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
