"""Whole-run limits: a cgroup of the run's own bounds the memory of all its processes together
(their pages, and the tmpfs, /dev/shm, memfd and pipe pages they fill) and how many processes
it may have, and lets the supervisor kill everything in it at once, `setsid()` or not.

rlimits stay the inner layer: they count one process at a time, which 32 processes, or memory
that is no mapping (memfd, pipes, tmpfs), get around.

Which cgroups, by what the machine has (read from /proc/self/mountinfo and /proc/self/cgroup):
- cgroup v2 whose controllers include `memory` and `pids`, delegated to the server's own cgroup
  (its `cgroup.subtree_control` lists them): the run's cgroup is made below the server's.
- otherwise cgroup v1 `memory` and `pids` hierarchies the server may write (this project's
  machines: a hybrid host with v2 at /sys/fs/cgroup/unified holding no controllers). The run
  gets a folder in each, and one in the v2 tree too where it has `cgroup.kill`.
- neither: the layer is missing; /healthz and the self-test say so, and say why.

The supervisor makes the folders (`RunCgroups.create`) and the launcher moves itself into each
before it drops privileges, so every process of the run starts inside. Torch-free.
"""

from __future__ import annotations

import functools
import os
import pwd
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RunCgroups", "available", "bound_all_runs", "machine_memory", "sweep"]

_PARENT = "autograd-lab"  # below the server's own cgroup in each hierarchy


@dataclass(frozen=True)
class _Backend:
    version: int
    memory: Path          # the server's own cgroup in the hierarchy with `memory`
    pids: Path            # ... with `pids` (the same folder in v2)
    killer: Path | None   # a v2 cgroup with cgroup.kill (v1: processes are killed one by one)


def _mounts() -> list[tuple[str, str, set[str], str]]:
    """(mount point, fs type, super options, the cgroup the mount shows as its root) of every
    cgroup file system (in a container the root is the container's own cgroup)."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, tail = left.split(), right.split()
        if len(parts) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((parts[4], tail[0], set(tail[2].split(",")), parts[3]))
    return found


def _own_paths() -> dict[str, str]:
    """The server's own cgroup path per v1 controller, and under "" for v2."""
    paths = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _inside(point: str, root: str, own: str) -> Path:
    """The server's cgroup `own` (as /proc/self/cgroup says) in a mount showing `root`."""
    relative = os.path.relpath(own, root) if own.startswith(root) else own.lstrip("/")
    return Path(point) / ("" if relative == "." else relative)


def _delegate_v2(own: Path) -> bool:
    """Let the run cgroups below `own` have memory and pids. A v2 cgroup with processes in it
    cannot give controllers to its children, so the server first moves itself (every thread
    process) into a leaf of its own, `own/autograd-lab-server`; where others share its cgroup,
    that still fails, and the layer is missing."""
    try:
        offered = set((own / "cgroup.controllers").read_text().split())
    except OSError:
        return False
    if not {"memory", "pids"} <= offered:
        return False
    control = own / "cgroup.subtree_control"
    try:
        _write(control, "+memory +pids")
        return True
    except OSError:
        pass
    try:
        leaf = own / f"{_PARENT}-server"
        leaf.mkdir(exist_ok=True)
        _write(leaf / "cgroup.procs", str(os.getpid()))
        _write(control, "+memory +pids")
        return True
    except OSError:
        return False


def _writable(folder: Path) -> bool:
    probe = folder / f"{_PARENT}-probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _detect() -> tuple[_Backend | None, str]:
    mounts, own = _mounts(), _own_paths()
    v2 = next(((m, root) for m, fs, _, root in mounts if fs == "cgroup2"), None)
    v2_own = _inside(v2[0], v2[1], own.get("", "/")) if v2 else None
    # cgroup.kill (Linux 5.14+) is in every v2 cgroup but the root; `kill` looks for it
    killer = v2_own
    if v2_own is not None and _writable(v2_own) and _delegate_v2(v2_own):
        return _Backend(2, v2_own, v2_own, killer), f"cgroup v2 at {v2_own} (memory, pids)"
    v1 = {}
    for point, fs, options, root in mounts:
        for controller in ("memory", "pids"):
            if fs == "cgroup" and controller in options and controller in own:
                v1[controller] = _inside(point, root, own[controller])
    if len(v1) == 2 and all(_writable(p) for p in v1.values()):
        killer = killer if killer is not None and _writable(killer) else None
        return _Backend(1, v1["memory"], v1["pids"], killer), (
            f"cgroup v1 memory and pids at {v1['memory']} and {v1['pids']}"
            + (f", killed as one through {killer}/cgroup.kill" if killer else ""))
    if not mounts:
        return None, "no cgroup file system is mounted"
    return None, ("no cgroup with the memory and pids controllers is writable by the server "
                  f"(uid {os.getuid()}): run it as root, or " + _how_to_delegate(mounts))


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def _how_to_delegate(mounts: list[tuple[str, str, set[str], str]]) -> str:
    """The commands that give this user a subtree, for the hierarchies this machine has: v1
    folders an administrator makes and hands over (the limits in them stay root's), or a v2
    subtree from systemd (docs/how-a-script-is-run.md, *As an ordinary user*)."""
    user = _user_name()
    v1 = {c: point for point, fs, options, _ in mounts if fs == "cgroup"
          for c in ("memory", "pids") if c in options}
    if len(v1) == 2:
        dirs = " ".join(f"{v1[c]}/autograd-lab-{user}" for c in ("memory", "pids"))
        return (f"delegate cgroup v1 memory and pids folders to {user}: `sudo sh -c 'for d in "
                f"{dirs}; do mkdir -p $d && chown {user} $d $d/cgroup.procs $d/tasks; done'`, "
                f"then start the server from inside them: `for d in {dirs}; do echo $$ > "
                "$d/cgroup.procs; done; make serve`")
    return ("start it with a delegated cgroup v2 subtree: as a systemd service with "
            "Delegate=yes (deploy/autograd-lab.service), or `systemd-run --user --scope -p "
            "Delegate=yes make serve`")


def sweep() -> list[str]:
    """Kill what runs of a server that is gone left in their cgroups, and remove those (a
    server that crashed could not). Folders of live servers are left alone."""
    backend, _ = _detect()
    if backend is None:
        return []
    swept = []
    bases = {backend.memory, backend.pids} | ({backend.killer} if backend.killer else set())
    for base in bases:
        # a server's folder (<pid>) and its runs (<pid>-<name>); top-level <pid>-<name>
        # folders are an older server's, from before each server had a folder of its own
        servers = [f for f in (base / _PARENT).glob("*") if f.name.isdigit()]
        for folder in [*(base / _PARENT).glob("*-*"), *(r for f in servers for r in f.glob("*-*"))]:
            pid = folder.name.split("-", 1)[0]
            if not pid.isdigit() or Path(f"/proc/{pid}").exists():
                continue
            run = RunCgroups(backend, [folder])
            run.kill(timeout=2.0)
            run.remove()
            swept.append(folder.name)
        for folder in servers:
            if not Path(f"/proc/{folder.name}").exists():
                RunCgroups(backend, [folder]).remove()
    return swept


def available() -> tuple[bool, str]:
    """(can runs get cgroups here, what and where, or why not)."""
    backend, detail = _detect()
    return backend is not None, detail


def machine_memory() -> int:
    """Bytes of memory the server's processes may use: the machine's, or less where the
    server's own cgroup is limited (a container, a systemd unit's MemoryMax)."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    backend, _ = _detect()
    if backend is not None:
        name = "memory.max" if backend.version == 2 else "memory.limit_in_bytes"
        try:
            own = (backend.memory / name).read_text().strip()
            if own.isdigit() and (total == 0 or int(own) < total):
                total = int(own)
        except OSError:
            pass
    return total


def bound_all_runs(memory_bytes: int) -> tuple[bool, str]:
    """Bound the memory of every run together: the folder that holds the runs' cgroups gets
    `memory_bytes`, so many runs, each within its own limit, cannot take the machine's memory
    from the server and from each other. (bounded or not, a sentence saying which)"""
    backend, detail = _detect()
    if backend is None:
        return False, f"the memory of all runs together is not bounded: {detail}"
    try:
        parent = _server_folder(backend.memory, backend.version)
        if backend.version == 2:
            _write(parent / "memory.max", str(memory_bytes))
        else:
            _write_v1_memory(parent, memory_bytes)
    except OSError as exc:
        parent = backend.memory / _PARENT / str(os.getpid())
        return False, (f"the memory of all runs together is not bounded: {parent} refused "
                       f"{memory_bytes >> 20} MiB ({exc.strerror or exc})")
    return True, f"all runs together may use {memory_bytes >> 20:,} MiB"


def _server_folder(base: Path, version: int) -> Path:
    """This server's folder for its runs' cgroups: autograd-lab/<server pid> below the
    server's own cgroup. One per server, so that its bound (`bound_all_runs`) is its own and
    another server on the machine (a test's, a second instance) neither sets nor meets it."""
    folder = base / _PARENT / str(os.getpid())
    if not folder.is_dir():
        for level in (folder.parent, folder):
            level.mkdir(exist_ok=True)
            if version == 2:  # a v2 folder hands its controllers down only when told to
                _write(level / "cgroup.subtree_control", "+memory +pids")
    return folder


def _write_v1_memory(folder: Path, memory_bytes: int) -> None:
    """v1 keeps memory.limit_in_bytes at most memory.memsw.limit_in_bytes at every moment:
    raising both, memsw goes first; lowering, it goes second."""
    limit, memsw = folder / "memory.limit_in_bytes", folder / "memory.memsw.limit_in_bytes"
    try:
        raising = int(limit.read_text()) < memory_bytes
    except (OSError, ValueError):
        raising = True
    order = [(memsw, True), (limit, False)] if raising else [(limit, False), (memsw, True)]
    for path, optional in order:
        _write(path, str(memory_bytes), missing_ok=optional)


@dataclass
class RunCgroups:
    """The cgroups of one run, one folder per hierarchy."""
    backend: _Backend
    folders: list[Path] = field(default_factory=list)

    @classmethod
    def create(cls, name: str, memory_bytes: int, processes: int) -> RunCgroups:
        backend, detail = _detect()
        if backend is None:
            raise OSError(detail)
        run = cls(backend)
        try:
            bases = [backend.memory] if backend.version == 2 else [backend.memory, backend.pids]
            if backend.version == 1 and backend.killer is not None:
                bases.append(backend.killer)
            for base in bases:
                # the server's pid first: `sweep` tells a dead server's leftovers by it
                folder = _server_folder(base, backend.version) / f"{os.getpid()}-{name}"
                folder.mkdir()
                run.folders.append(folder)
            run._limit(memory_bytes, processes)
        except BaseException:
            run.remove()
            raise
        return run

    def _limit(self, memory_bytes: int, processes: int) -> None:
        b = self.backend
        if b.version == 2:
            folder = self.folders[0]
            _write(folder / "memory.max", str(memory_bytes))
            _write(folder / "memory.swap.max", "0", missing_ok=True)
            _write(folder / "pids.max", str(processes))
            return
        memory, pids = self.folders[0], self.folders[1]
        _write(memory / "memory.limit_in_bytes", str(memory_bytes))
        # memory and swap together: a run may not move its pages to swap to go on growing
        _write(memory / "memory.memsw.limit_in_bytes", str(memory_bytes), missing_ok=True)
        _write(pids / "pids.max", str(processes))

    @property
    def procs_files(self) -> list[str]:
        """The files the launcher writes its pid to (`0`: itself)."""
        return [str(f / "cgroup.procs") for f in self.folders]

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed for using the run's memory."""
        folder = self.folders[0] if self.folders else None
        if folder is None:
            return 0
        name = "memory.events" if self.backend.version == 2 else "memory.oom_control"
        try:
            for line in (folder / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def own_limit_hit(self) -> bool:
        """Whether the run's memory reached its own limit. A run killed without reaching it
        was chosen at the bound of all runs together (`bound_all_runs`)."""
        folder = self.folders[0] if self.folders else None
        if folder is None:
            return False
        try:
            if self.backend.version == 2:
                for line in (folder / "memory.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value) > 0
                return False
            # v1's failcnt stays 0 on recent kernels, own limit hit or not: its peak tells
            # (a charge that failed left the usage within a huge page of the limit)
            peak = int((folder / "memory.max_usage_in_bytes").read_text())
            return peak >= int((folder / "memory.limit_in_bytes").read_text()) - (4 << 20)
        except (OSError, ValueError):
            return True  # cannot tell: blame the run's own limit, as before

    def pids(self) -> list[int]:
        found: set[int] = set()
        for folder in self.folders:
            try:
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def kill(self, timeout: float = 5.0) -> list[int]:
        """Kill every process of the run, however it detached itself; returns what is left."""
        killer = next((f for f in self.folders if (f / "cgroup.kill").exists()), None)
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids()
            if not left or time.monotonic() > deadline:
                return left
            if killer is not None:
                _write(killer / "cgroup.kill", "1", missing_ok=True)
            for pid in left:  # v1: one by one, again until none is left (a fork may race us)
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        """Remove the folders (the kernel refuses while a process is in one: kill first)."""
        for folder in reversed(self.folders):
            for _ in range(250):  # exiting tasks keep it busy a moment after the kill
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)
        self.folders = []


def _write(path: Path, value: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
