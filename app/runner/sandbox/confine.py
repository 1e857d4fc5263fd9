"""Inside the worker, after the imports: apply Landlock, then (with the job) the rlimits.

What the worker may still read is derived from the worker itself: its interpreter, the
entries of its `sys.path` (torch, numpy, scipy may import submodules lazily), the system's
shared libraries, /proc and the CPU topology in /sys (read by OpenMP and numpy), a few devices,
and on a machine with an NVIDIA GPU its device files and driver folder (gpu.py).
Left out on purpose: /etc, /home, /root, and the app's own source tree, which is already
imported. Installed (pip install, the container image), the app sits in site-packages beside
torch: every other entry of that folder is readable, the app's is not (a checkout above the
app, by contrast, is left out whole: it holds more than packages). The same for a system folder
granted whole (/usr/local/lib, /usr/lib), where a pip install without a venv puts the app.
/etc/passwd and /etc/group are read only in a root of the run's own, where they are its own
(own_root.py), not the machine's list of accounts. Torch-free.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import gpu, landlock

__all__ = ["apply_landlock", "apply_seccomp", "landlock_rules"]

_SYSTEM_READ = ["/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib", "/proc",
                "/sys/devices/system/cpu", "/sys/fs/cgroup", "/usr/share/zoneinfo"]
_OWN_ROOT_READ_FILES = ["/etc/passwd", "/etc/group"]
_SYSTEM_READ_FILES = ["/etc/ld.so.cache", "/etc/localtime", "/dev/urandom", "/dev/random",
                      "/dev/zero"]
_SYSTEM_WRITE_FILES = ["/dev/null"]


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def landlock_rules(run_dir: Path, app_dir: Path, private_shm: bool = False,
                   own_root: bool = False) -> dict[str, list[str]]:
    """Readable directories and files, writable ones: everything else is refused."""
    run_dir, app_dir = run_dir.resolve(), app_dir.resolve()
    read: list[str] = []
    candidates = [sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
                  *[p for p in sys.path if p]]
    for entry in candidates:
        path = Path(entry).resolve()
        if not path.is_dir() or _within(path, run_dir):
            continue
        if _within(app_dir, path):
            # a sys.path entry above the app: a package folder gives all but the app (torch
            # imports functorch and others lazily, after this); a source checkout nothing
            if _is_package_folder(path):
                read += [p for p in _all_but(path, app_dir) if p not in read]
            continue
        if str(path) not in read:
            read.append(str(path))
    # a GPU's driver, where this machine has one (gpu.py): its libraries and device files
    read += [d for d in gpu.driver_dirs() if d not in read]
    # a system folder above the app (a pip install without a venv puts it in
    # /usr/local/lib/python3.X/site-packages, Debian's in /usr/lib/python3/dist-packages) gives
    # all but the app too: a grant of the whole folder would let a run read the app's sources
    for folder in _SYSTEM_READ:
        path = Path(folder).resolve()
        if _within(app_dir, path) and path.is_dir():
            read += [p for p in _all_but(path, app_dir) if p not in read]
        elif folder not in read:
            read.append(folder)
    return {"read": read,
            "read_files": _SYSTEM_READ_FILES + (_OWN_ROOT_READ_FILES if own_root else []),
            "write": [str(run_dir)] + (["/dev/shm"] if private_shm else []),
            "write_files": _SYSTEM_WRITE_FILES,
            "device_files": gpu.device_files()}


def _is_package_folder(path: Path) -> bool:
    """Is `path` where an installer puts packages (site-packages, Debian's dist-packages)?"""
    import sysconfig
    installed = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    return path in installed or path.name in ("site-packages", "dist-packages")


def _all_but(folder: Path, hidden: Path, _seen: set[Path] | None = None) -> list[str]:
    """Every entry of `folder` except `hidden` (a folder beneath it, at any depth). An entry
    is judged by where it leads: Landlock follows a symlink to its target, so a link to the
    app, or to a folder above it (python3 -> python3.11), is split as the folder itself."""
    seen = _seen if _seen is not None else set()
    seen.add(folder)
    kept: list[str] = []
    for child in sorted(folder.iterdir()):
        real = child.resolve()
        if real == hidden:
            continue
        if _within(hidden, real):
            if real not in seen:
                kept += _all_but(real, hidden, seen)
        else:
            kept.append(str(child))
    return kept


def _folded(granted: list[str], app_dir: Path) -> list[str]:
    """The granted paths as the sandbox report says them: the entries of a package folder
    that holds the app as one line (some hundred paths would crowd the worker's READY line)."""
    app_dir = app_dir.resolve()
    system = {Path(folder).resolve() for folder in _SYSTEM_READ}
    folded: list[str] = []
    for path in granted:
        # the outermost folder split around the app: a system folder, else a package folder
        above = next((str(p) for p in reversed(Path(path).parents)
                      if _within(app_dir, p) and p in system), None) or \
            next((str(p) for p in Path(path).parents
                  if _within(app_dir, p) and _is_package_folder(p)), None)
        shown = f"{above} (all but {app_dir.relative_to(above)})" if above else path
        if shown not in folded:
            folded.append(shown)
    return folded


def apply_landlock(run_dir: Path, app_dir: Path, private_shm: bool = False,
                   own_root: bool = False) -> dict:
    """Confine this process for good; the result (or why not) goes into the sandbox report.
    `private_shm`: /dev/shm is a tmpfs of the run's own, so it may be written; `own_root`:
    the process is in a root of the run's own (own_root.py)."""
    rules = landlock_rules(run_dir, app_dir, private_shm, own_root)
    try:
        enforced = landlock.restrict(**rules)
        enforced["read"] = _folded(enforced["read"], app_dir)
        return {"enforced": True, **enforced}
    except OSError as exc:
        return {"enforced": False, "reason": str(exc)}


def apply_seccomp() -> dict:
    """The seccomp filter (seccomp.py), before Landlock (its library is found by running
    ldconfig) and READY; the result (or why not) goes into the sandbox report."""
    from . import seccomp

    try:
        return seccomp.install()
    except Exception as exc:  # noqa: BLE001 - a missing library is a finding, said in the report
        return {"enforced": False, "reason": f"{type(exc).__name__}: {exc}"}


def drop_stdin() -> None:
    """The job has been read: the script gets an empty stdin."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
