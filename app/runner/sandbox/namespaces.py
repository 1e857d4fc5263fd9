"""New network, PID, IPC and mount namespaces for a run, through util-linux `unshare`.

- network: the run sees only its own loopback, which is down: no server port, no internet;
- PID: the worker is PID 1 of its namespace, so when it ends the kernel kills every process it
  left behind, including one that detached with setsid; `--kill-child` ends the worker if
  `unshare` itself is killed; `--mount-proc` gives it a /proc that shows only its own processes;
- IPC: no System V shared memory or semaphores shared with anything else;
- mount: lets the launcher expose the interpreter to the run's uid (see `identity.expose`)
  without changing anything outside.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

__all__ = ["check", "unshare_prefix"]

FLAGS = ("--net", "--pid", "--ipc", "--mount", "--mount-proc", "--fork", "--kill-child")
NAMESPACES = ("net", "pid", "ipc", "mnt")


def unshare_prefix() -> list[str]:
    """The command prefix that starts a program in fresh namespaces (check() first)."""
    return [shutil.which("unshare") or "unshare", *FLAGS, "--"]


@functools.lru_cache(maxsize=1)
def check() -> tuple[bool, str]:
    """(available, why not): try it once, since containers and seccomp often forbid it."""
    exe = shutil.which("unshare")
    if exe is None:
        return False, "util-linux `unshare` is not installed"
    try:
        done = subprocess.run([exe, *FLAGS, "--", "true"], capture_output=True, timeout=10,
                              check=False, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`unshare` could not be run: {exc}"
    if done.returncode != 0:
        return False, ("the kernel refused new namespaces (`unshare " + " ".join(FLAGS) +
                       "`): " + (done.stderr.strip() or f"exit status {done.returncode}"))
    return True, "net, pid, ipc and mount namespaces via util-linux unshare"
