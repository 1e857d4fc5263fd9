"""A root of the run's own, made in its mount namespace before it drops privileges: the run's
`/` is a new, empty tmpfs holding bind mounts of exactly what it needs and nothing else, and the
machine's root is gone from its view (`pivot_root`, then the old root detached).

The network namespace keeps a run from the machine's ports, but a Unix socket is a file: a run
that can reach `/run/dbus/system_bus_socket`, an X11 socket in /tmp, `/dev/log` or a socket
beside the app by its path can connect to it (Landlock does not govern connect()). What the new
root holds:
- the paths the supervisor lists (`LaunchPlan.own_root`): the interpreter's prefix, the venv,
  the app's package folder and the run folder (with its private tmpfs), each at its own path;
- the system's libraries (`/usr/lib`, `/usr/lib64`, `/usr/local/lib`) and the top-level
  symlinks to them (`/lib`, `/lib64`, ...), the time zones, `/etc/ld.so.cache` and
  `/etc/localtime`;
- an `/etc/passwd` and `/etc/group` of its own naming root, the run's uid and nobody
  (`getpass.getuser()`, `Path.home()` and `~` in paths need its entry; the machine's
  accounts stay unseen);
- `/dev` with null, zero, full, random and urandom, `/dev/fd` and the standard streams as
  links into `/proc/self`, and the run's own `/dev/shm`;
- the run's own `/proc`, and `/sys/devices/system/cpu` (OpenMP and numpy read the topology).
Built from a list, not by hiding what is there: a folder or socket that appears on the machine
later (while a pooled worker waits) is not in the run's root either. Only in a mount namespace
of the run's own (enter.py checks); nothing changes outside. Torch-free.
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
from pathlib import Path

from . import gpu

__all__ = ["enter_own_root"]

# /lib* are symlinks into /usr on a merged-/usr system (copied as links), real folders elsewhere
SYSTEM_DIRS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/local/lib", "/lib", "/lib32",
               "/lib64", "/libx32", "/usr/share/zoneinfo")
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2"}
RUN_USER = "autograd-lab-run"
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
OPTIONAL = ("/sys/devices/system/cpu",)  # read if there, not needed to run
_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_MNT_DETACH = 2
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_OLD = ".old-root"
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _outermost(paths: list[str]) -> list[str]:
    """Each path once, and none below another one (its bind mount carries it)."""
    real = sorted({os.path.normpath(p) for p in paths})
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/")
                                       for q in real)]


def _bind(source: str, new_root: Path, mount, recursive: bool = True) -> None:
    target = new_root / source.lstrip("/")
    if os.path.isdir(source):
        target.mkdir(parents=True, exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.touch()
    mount(source, str(target), None, _MS_BIND | (_MS_REC if recursive else 0))


def _read_only(target: Path, mount) -> None:
    """The bind mount at `target` read-only (its top mount; Landlock refuses writes anyway).
    Where the kernel refuses (a mount locked by a parent user namespace), it stays as it is."""
    try:
        mount(None, str(target), None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID)
    except OSError:
        pass


def _accounts(etc: Path, uid: int | None, gid: int | None, home: str) -> None:
    """passwd and group files naming only root, the run's own uid and nobody."""
    etc.mkdir(exist_ok=True)
    users = [("root", 0, 0, "/root"), ("nobody", 65534, 65534, "/nonexistent")]
    if uid not in (None, 0, 65534):
        users.insert(1, (RUN_USER, uid, gid if gid is not None else uid, home))
    (etc / "passwd").write_text("".join(
        f"{name}:x:{u}:{g}::{folder}:/usr/sbin/nologin\n" for name, u, g, folder in users))
    groups = {g: name for name, _, g, _ in reversed(users)}
    (etc / "group").write_text("".join(f"{name}:x:{g}:\n" for g, name in groups.items()))


def enter_own_root(keep: list[str], staging: Path, mount, uid: int | None = None,
                   gid: int | None = None) -> list[str]:
    """Make the new root at `staging` (a folder of the run's own, e.g. in its /dev/shm), fill
    it, pivot into it and drop the old one; returns the paths the run sees. `mount(source,
    target, fstype, flags, data)` is the launcher's; `uid` and `gid` are the run's, for its
    passwd entry (its home is the run folder). The current directory becomes `/`."""
    new_root = staging
    new_root.mkdir(exist_ok=True)
    mount("tmpfs", str(new_root), "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    seen = []
    for link in sorted(os.listdir("/")):  # /lib -> usr/lib and the like, as they are
        if stat.S_ISLNK(os.lstat("/" + link).st_mode):
            (new_root / link).symlink_to(os.readlink("/" + link))
    # a GPU's driver libraries too (gpu.py: a container may mount them in /usr/local/nvidia)
    wanted = [p for p in (*SYSTEM_DIRS, *gpu.driver_dirs(), *keep)
              if os.path.exists(p) and not os.path.islink(p)]
    for path in _outermost(wanted):
        _bind(path, new_root, mount)
        if path not in keep[-1:]:  # all but the run folder (the last kept path) read-only
            _read_only(new_root / path.lstrip("/"), mount)
        seen.append(path)
    # CUDA_VISIBLE_DEVICES reaches the worker: so do NVIDIA's device files (gpu.py)
    for path in (*SYSTEM_FILES, *DEVICES, *gpu.device_files()):
        if os.path.exists(path):
            _bind(path, new_root, mount, recursive=False)
            seen.append(path)
    _accounts(new_root / "etc", uid, gid, keep[-1] if keep else "/tmp")
    (new_root / "dev").mkdir(exist_ok=True)
    for name, target in _DEV_LINKS.items():
        (new_root / "dev" / name).symlink_to(target)
    # the run's own /dev/shm (a tmpfs enter.py made) holds the staging folder: not recursive
    _bind("/dev/shm", new_root, mount, recursive=False)
    _bind("/proc", new_root, mount)
    for path in OPTIONAL:
        try:
            _bind(path, new_root, mount)
            seen.append(path)
        except OSError:
            pass  # e.g. refused inside a user namespace: the run reads no CPU topology
    (new_root / "tmp").mkdir(exist_ok=True)
    (new_root / _OLD).mkdir()
    number = _SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(f"no pivot_root number known for {platform.machine()}")
    _check(_libc.syscall(number, str(new_root).encode(),
                         str(new_root / _OLD).encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(f"/{_OLD}".encode(), _MNT_DETACH), "detaching the old root")
    os.rmdir(f"/{_OLD}")
    # the new root's own folders (/tmp, /root, ...) are for show only: nothing is written there
    mount(None, "/", None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return seen
