"""A root of the run's own, made in its mount namespace before it drops privileges: the run
sees the interpreter, the packages, the app, its own folder, the system's libraries, /etc, /dev
(with a /dev/shm of its own) and its own /proc, and nothing else of the machine.

The network namespace keeps a run from the machine's ports, but a Unix socket is a file: a
run that can reach `/run/dbus/system_bus_socket`, an X11 socket in /tmp or a database's socket
by its path can connect to it (Landlock does not govern connect()). So every other top-level
folder is covered with an empty read-only tmpfs, and one that holds a path the run needs (/tmp
holds the run folder, /root an interpreter) with a tmpfs holding only bind mounts of the
needed folders one level down. A socket file at the top level is covered with /dev/null.
`/sys/fs/cgroup` is covered too: a run has no business reading every run's cgroup. Only in a
mount namespace of the run's own (enter.py checks); nothing changes outside. Torch-free.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["SYSTEM", "cover_the_rest"]

# top-level folders every run keeps as they are (read access is Landlock's to decide)
SYSTEM = frozenset({"usr", "lib", "lib32", "lib64", "libx32", "bin", "sbin", "etc", "dev",
                    "proc", "sys"})
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC = 32, 4096, 8192, 16384


def _needed_children(top: str, keep: list[str]) -> set[str] | None:
    """The names below /top that kept paths go through; None when /top itself is kept."""
    names: set[str] = set()
    for path in keep:
        parts = Path(os.path.normpath(path)).parts  # ("/", "top", "child", ...)
        if len(parts) < 2 or parts[1] != top:
            continue
        if len(parts) == 2:
            return None
        names.add(parts[2])
    return names


def cover_the_rest(keep: list[str], staging: Path, mount) -> list[str]:
    """Cover every top-level entry but the system's and those `keep` goes through; returns
    what was covered. `mount(source, target, fstype, flags, data)` is the launcher's."""
    covered = []
    for name in sorted(os.listdir("/")):
        path = "/" + name
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or name in SYSTEM:
            continue
        if stat.S_ISSOCK(st.st_mode):
            mount("/dev/null", path, None, _MS_BIND)
            covered.append(path)
            continue
        if not stat.S_ISDIR(st.st_mode):
            continue  # a file: Landlock refuses reading it, and it is no socket
        children = _needed_children(name, keep)
        if children is None:
            continue
        staged = []
        for i, child in enumerate(sorted(children)):
            source = Path(path) / child
            if not source.exists():
                continue
            stage = staging / f".own-root-{name}-{i}"
            stage.mkdir()
            mount(str(source), str(stage), None, _MS_BIND | _MS_REC)
            staged.append((child, stage, source.is_dir()))
        mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
              "mode=0755,size=64k,nr_inodes=64")
        for child, stage, is_dir in staged:
            target = Path(path) / child
            if is_dir:
                target.mkdir()
            else:
                target.touch()
            mount(str(stage), str(target), None, _MS_MOVE)
            stage.rmdir()
        mount(None, path, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        covered.append(path)
    if os.path.isdir("/sys/fs/cgroup"):
        mount("tmpfs", "/sys/fs/cgroup", "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC,
              "mode=0555,size=4k,nr_inodes=4")
        covered.append("/sys/fs/cgroup")
    return covered
