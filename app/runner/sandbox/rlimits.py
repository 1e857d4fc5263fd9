"""Resource limits (setrlimit) for one run: how much memory, CPU, file size, open files and
processes a script may use.

Two moments: `early` limits are set by the launcher before the worker is exec'd (no core files,
a process cap for the run's own uid); `job` limits are set inside the worker once torch is
imported, because importing torch maps about 600 MB of address space and opens files that the
script should not have to pay for. Limits only ever go down, so the script cannot raise them.
"""

from __future__ import annotations

import os
import resource
from dataclasses import asdict, dataclass

__all__ = ["ResourceLimits", "address_space_in_use", "apply_early", "apply_job"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class ResourceLimits:
    memory_mb: int = 2048      # address space the script may add on top of the loaded worker
    run_memory_mb: int = 3072  # every process of the run together, tmpfs and memfd included
                               # (a cgroup; the loaded worker itself takes about 300 MiB)
    file_size_mb: int = 64     # largest file the run may write (the Trace document included)
    report_mb: int = 32        # largest Trace the server reads back (it is parsed in the server)
    open_files: int = 256      # descriptors beyond those the worker already holds
    processes: int = 32        # processes and threads of the run's uid, the worker included
    cpu_grace_s: int = 5       # CPU seconds beyond the wall-clock limit on every core the
                               # run may use (a backstop only: the wall clock ends a run)
    folder_mb: int = 256       # room in the run folder, all files together (a private tmpfs)
    folder_files: int = 4096   # files and folders the run folder may hold

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ResourceLimits:
        return cls(**data)


def _lower(which: int, value: int) -> None:
    """Set soft and hard limit to `value`, never above the current hard limit."""
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def apply_early(limits: ResourceLimits) -> dict:
    """In the launcher, before dropping to the run's uid: nothing the script does may dump core,
    and a fork bomb stops at `processes` (counted per uid, so each run has its own uid)."""
    _lower(resource.RLIMIT_CORE, 0)
    _lower(resource.RLIMIT_NPROC, limits.processes)
    return {"core": 0, "processes": limits.processes}


def address_space_in_use() -> int:
    """Bytes of virtual address space this process maps now (VmSize)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def apply_job(limits: ResourceLimits, wall_clock_s: float, address_space: bool = True) -> dict:
    """In the worker, after the imports and before the script: the script's own budget.
    `address_space=False` (a run on a CUDA GPU) leaves the address space unlimited: CUDA
    reserves tens of GB of it when it starts, however little memory it then uses, and fails
    to start under a cap; the run's memory cgroup still bounds the memory it really takes."""
    cap = address_space_in_use() + limits.memory_mb * MIB
    if address_space:
        _lower(resource.RLIMIT_AS, cap)
    _lower(resource.RLIMIT_FSIZE, limits.file_size_mb * MIB)
    used_fds = _open_descriptors()
    _lower(resource.RLIMIT_NOFILE, used_fds + limits.open_files)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # a backstop behind the supervisor's wall clock, never ahead of it: a script on n threads
    # spends n CPU seconds a second, so a cap of the wall clock's length once killed a
    # two-threaded training loop (SIGXCPU, its recorded passes lost) before its time was up
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    cpu = int(usage.ru_utime + usage.ru_stime + wall_clock_s * cores + limits.cpu_grace_s) + 1
    # soft limit: SIGXCPU; the hard limit one second later is a SIGKILL nothing can catch
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU,
                       (cpu, cpu + 1 if hard == resource.RLIM_INFINITY else min(cpu + 1, hard)))
    return {"address_space_mb": cap // MIB if address_space else None,
            "file_size_mb": limits.file_size_mb,
            "open_files": used_fds + limits.open_files, "cpu_s": cpu,
            "processes": resource.getrlimit(resource.RLIMIT_NPROC)[0]}


def _open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16
