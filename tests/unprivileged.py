"""Run a command as an unprivileged user (nobody, 65534), for the tests of a server that is not
root. The interpreter of this project's machines lives below /root (mode 700), which such a user
cannot enter: the command gets a mount namespace of its own in which /root is a read-only view
of just the interpreter's folder. Needs root (the tests that use it skip otherwise)."""

from __future__ import annotations

import os
import shlex
import sys

__all__ = ["NOBODY", "as_unprivileged", "can_run_unprivileged"]

NOBODY = 65534


def can_run_unprivileged() -> bool:
    return os.geteuid() == 0


def as_unprivileged(cmd: list[str], uid: int = NOBODY) -> list[str]:
    """`cmd` as `uid` (no groups, no capabilities), with the interpreter reachable."""
    base = os.path.realpath(sys.base_prefix)
    script = "set -eu\n"
    if base.startswith("/root/"):
        top = "/root/" + base.split("/")[2]
        script += (f'view=$(mktemp -d)\nmount --bind /root "$view"\n'
                   "mount -t tmpfs -o mode=755,size=1m tmpfs /root\n"
                   f"mkdir -p {shlex.quote(top)}\n"
                   f'mount --bind "$view/{top[6:]}" {shlex.quote(top)}\n'
                   f"mount -o remount,bind,ro {shlex.quote(top)}\n")
    script += (f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all "
               '"$@"\n')
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            *cmd]
