"""New network, PID, IPC and mount namespaces for a run, through util-linux `unshare`.

- network: the run sees only its own loopback, which is down: no server port, no internet;
- PID: the worker is PID 1 of its namespace, so when it ends the kernel kills every process it
  left behind, including one that detached with setsid; `--kill-child` ends the worker if
  `unshare` itself is killed; `--mount-proc` gives it a /proc that shows only its own processes;
- IPC: no System V shared memory or semaphores shared with anything else;
- mount: lets the launcher expose the interpreter to the run's uid (see `identity.expose`)
  without changing anything outside.

A server that is not root gets them through a user namespace of the run's own
(`--user --map-root-user`): inside it the launcher is "root" of nothing but the run, which may
mount its private folders and set a process cap that counts only the run's processes (Linux
counts RLIMIT_NPROC per user namespace). Where even that is refused (some containers, a
sysctl), the layer is missing and the self-test says so.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

__all__ = ["check", "in_user_namespace", "unshare_prefix"]

FLAGS = ("--net", "--pid", "--ipc", "--mount", "--mount-proc", "--fork", "--kill-child")
USER_FLAGS = ("--user", "--map-root-user")
NAMESPACES = ("net", "pid", "ipc", "mnt")


def in_user_namespace() -> bool:
    """Do runs get a user namespace of their own (the server is not root)?"""
    return os.geteuid() != 0


def _flags() -> tuple[str, ...]:
    return (*USER_FLAGS, *FLAGS) if in_user_namespace() else FLAGS


def unshare_prefix() -> list[str]:
    """The command prefix that starts a program in fresh namespaces (check() first)."""
    return [shutil.which("unshare") or "unshare", *_flags(), "--"]


@functools.lru_cache(maxsize=1)
def check() -> tuple[bool, str]:
    """(available, why not): try it once, since containers and seccomp often forbid it."""
    exe = shutil.which("unshare")
    if exe is None:
        return False, "util-linux `unshare` is not installed"
    try:
        done = subprocess.run([exe, *_flags(), "--", "true"], capture_output=True, timeout=10,
                              check=False, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"`unshare` could not be run: {exc}"
    if done.returncode != 0:
        return False, ("the kernel refused new namespaces (`unshare " + " ".join(_flags()) +
                       "`): " + (done.stderr.strip() or f"exit status {done.returncode}"))
    if in_user_namespace():
        return True, ("net, pid, ipc and mount namespaces inside a user namespace of the run's "
                      "own (the server is not root), via util-linux unshare")
    return True, "net, pid, ipc and mount namespaces via util-linux unshare"
