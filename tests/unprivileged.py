"""Run a command as an unprivileged user (nobody, 65534), for the tests of a server that is not
root. The interpreter of this project's machines lives below /root (mode 700), which such a user
cannot enter: the command gets a mount namespace of its own in which /root is a read-only view
of just the interpreter's folder. Needs root (the tests that use it skip otherwise)."""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["NOBODY", "as_unprivileged", "can_run_unprivileged", "delegated_v1_cgroups"]

NOBODY = 65534


def can_run_unprivileged() -> bool:
    return os.geteuid() == 0


def as_unprivileged(cmd: list[str], uid: int = NOBODY,
                    cgroups: Sequence[Path] = ()) -> list[str]:
    """`cmd` as `uid` (no groups, no capabilities), with the interpreter reachable; started
    inside `cgroups` (folders whose cgroup.procs it writes first: a delegated subtree)."""
    base = os.path.realpath(sys.base_prefix)
    script = "set -eu\n"
    for folder in cgroups:
        script += f"echo $$ > {shlex.quote(str(folder / 'cgroup.procs'))}\n"
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


@contextmanager
def delegated_v1_cgroups(uid: int = NOBODY) -> Iterator[list[Path] | None]:
    """A cgroup v1 `memory` and `pids` subtree handed to `uid` the way an administrator
    delegates one (docs/how-a-script-is-run.md, *As an ordinary user*): a folder in each
    hierarchy, below this process's own cgroup, whose folder, cgroup.procs and tasks that user
    owns (its limits stay root's). Yields the two folders, or None where this machine has no
    such hierarchies."""
    from app.runner.sandbox.cgroups import _inside, _mounts, _own_paths

    own = _own_paths()
    folders = []
    for controller in ("memory", "pids"):
        point = next(((p, root) for p, fs, options, root in _mounts()
                      if fs == "cgroup" and controller in options), None)
        if point is None or controller not in own:
            break
        folder = _inside(point[0], point[1], own[controller]) / f"delegated-test-{os.getpid()}"
        folders.append(folder)
    if len(folders) != 2:
        yield None
        return
    try:
        for folder in folders:
            folder.mkdir()
            for path in (folder, folder / "cgroup.procs", folder / "tasks"):
                os.chown(path, uid, uid)
        yield folders
    finally:
        for folder in folders:
            for child in sorted(folder.glob("**/"), key=lambda p: -len(p.parts)):
                for _ in range(100):  # exiting tasks keep a cgroup busy for a moment
                    try:
                        child.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.05)
