"""The launcher: `python -S -m app.runner.sandbox.enter PLAN_JSON -- PROGRAM ARGS...`.

Runs as root inside the run's fresh namespaces (when there are any), for a few milliseconds:
it makes the interpreter reachable for the run's uid, sets the early resource limits, drops to
that uid for good (no supplementary groups, no_new_privs: no setuid program can give anything
back) and exec's the worker. Everything it does happens before a line of the script exists
in this process tree. Torch-free, and quick to import (-S: no site).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from pathlib import Path

from ..protocol import LaunchPlan, PlanError
from .identity import blocked_ancestors
from .own_root import enter_own_root
from .rlimits import ResourceLimits, apply_early

_MS_RDONLY, _MS_NOSUID, _MS_NODEV = 1, 2, 4
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC = 32, 4096, 8192, 16384
_PR_SET_NO_NEW_PRIVS = 38
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def expose(paths: list[str], uid: int, gid: int, staging: Path) -> list[str]:
    """Make `paths` reachable for `uid` in this (private) mount namespace.

    A directory the uid cannot enter (typically /root, mode 700, above a pyenv interpreter) is
    covered by a read-only tmpfs holding only bind mounts of the needed children: the run sees
    the interpreter but nothing else of that directory, and nothing changes outside.
    """
    covered = []
    for _ in range(8):  # a blocked directory below an exposed one needs another round
        blocked = blocked_ancestors(paths, uid, gid)
        if not blocked:
            return covered
        for folder, names in blocked.items():
            staged = []
            for i, name in enumerate(sorted(names)):
                stage = staging / f".expose-{len(covered)}-{i}"
                stage.mkdir()
                _mount(str(Path(folder) / name), str(stage), None, _MS_BIND | _MS_REC)
                staged.append((name, stage))
            _mount("tmpfs", folder, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
            for name, stage in staged:
                (Path(folder) / name).mkdir()
                _mount(str(stage), str(Path(folder) / name), None, _MS_MOVE)
                stage.rmdir()
            _mount(None, folder, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
            covered.append(folder)
    raise OSError(f"could not make {paths} reachable for uid {uid}")


def private_folder(run_dir: str, limits: ResourceLimits, uid: int, gid: int) -> None:
    """Cover the run folder with a tmpfs of bounded size and file count, seen only in this
    mount namespace: a script can fill it, not the server's disk. The supervisor reaches it
    through /proc/PID/root, and keeps a descriptor so it can read the result after the end."""
    _mount("tmpfs", run_dir, "tmpfs", _MS_NOSUID | _MS_NODEV,
           f"size={limits.folder_mb}m,nr_inodes={limits.folder_files},mode=0700,"
           f"uid={uid},gid={gid}")


def _own_mount_namespace(server_ns: str | None) -> bool:
    """Are we in a mount namespace other than the server's? Mounts made anywhere else would
    cover the server's own /root, /dev/shm or run folders."""
    return server_ns is not None and os.readlink("/proc/self/ns/mnt") != server_ns


def join_cgroups(procs_files: list[str]) -> None:
    """Move this process into the run's cgroups ("0": the writer), before anything else: every
    process of the run is then counted, limited and killed with it."""
    for path in procs_files:
        with open(path, "w") as f:
            f.write("0")


_CLONE_NEWCGROUP = 0x02000000


def prepare(plan: LaunchPlan) -> None:
    """The first step of every run's worker, exec'd or forked: into the run's cgroups (so that
    everything after is counted, limited and killed with it), then a cgroup namespace rooted
    there, then its CPU priority (only ever lower: the run cannot take it back). First of all,
    no signal blocked: the mask outlives fork and exec, and a CLI started by a job runner that
    blocks SIGTERM (or SIGALRM) in its threads handed it on, so the time limit's SIGTERM never
    reached the worker, which lost its recorded passes to the SIGKILL after the grace period
    (and `unshare` 2.38 then exits 1: "sigprocmask unblock failed")."""
    unblock_signals()
    join_cgroups(plan.cgroups)
    if plan.cgroups and os.readlink("/proc/self/ns/mnt") != plan.server_mnt_ns:
        # its own cgroup is its "/": /proc/self/cgroup no longer names the server's pid, the
        # machine's cgroup tree or the container's (found by the attacker's read). Only in a
        # run with namespaces of its own, as everything the launcher unshares
        if _libc.unshare(_CLONE_NEWCGROUP) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"a cgroup namespace: {os.strerror(err)}")
    if plan.nice:
        os.nice(plan.nice)


def unblock_signals() -> None:
    """Every signal delivered again in this thread (and the threads it starts)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def enter(plan: LaunchPlan) -> None:
    prepare(plan)
    confine(plan)


def confine(plan: LaunchPlan) -> None:
    """Everything after the cgroups: the mounts (only in a mount namespace of the run's own),
    the early limits, the run's uid for good, no_new_privs. The fork server's children call
    this too, after their own cgroups and namespaces (app/runner/fork_server_process.py)."""
    limits = ResourceLimits.from_json(plan.limits)
    uid = plan.uid
    wants_mounts = plan.expose or plan.private_shm or plan.private_folder or plan.own_root
    if wants_mounts and not _own_mount_namespace(plan.server_mnt_ns):
        raise OSError("refusing to mount: not in a mount namespace of the run's own")
    if uid is not None and plan.expose:
        expose(plan.expose, uid, plan.gid, Path(plan.run_dir))
    if plan.private_shm:
        # POSIX shared memory and semaphores (multiprocessing, DataLoader workers) get their
        # own small /dev/shm: writable for the run, invisible to everyone else
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV,
               f"size={limits.folder_mb}m,nr_inodes={limits.folder_files},mode=1777")
    if plan.private_folder:
        private_folder(plan.run_dir, limits, uid or 0, plan.gid or 0)
        os.chdir(plan.run_dir)  # the old cwd is the folder below the new tmpfs
    if plan.own_root:
        if not plan.private_shm:
            raise OSError("a root of the run's own stages its mounts in the run's /dev/shm")
        # the run folder (its tmpfs included) is one of the paths kept; built in the run's
        # own /dev/shm, which the new root keeps (own_root.py)
        enter_own_root(plan.own_root, Path("/dev/shm/.root"), _mount, uid, plan.gid)
        os.chdir(plan.run_dir)
    if uid is not None:
        apply_early(limits)  # NPROC counts the new uid's processes, none yet
        os.setgroups([])
        os.setresgid(plan.gid, plan.gid, plan.gid)
        os.setresuid(uid, uid, uid)
    elif plan.user_namespace:
        # a user namespace of the run's own: NPROC counts the processes in it, only the run's
        apply_early(limits)
    else:
        # the process cap counts per uid: with the server's own uid it would cap the server
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    raise_stack_limit()


STACK_BYTES = 1 << 30


def raise_stack_limit() -> None:
    """A larger C stack for the worker (set before exec: the main thread's stack size is fixed
    then). Freeing a graph of ~50k nodes that Python has wrapped recurses in torch and
    overflows the default 8 MiB, killing the worker with SIGSEGV after the trace is done.
    The pages are only used as the recursion needs them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    want = STACK_BYTES if hard == resource.RLIM_INFINITY else min(STACK_BYTES, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_STACK, (want, hard))


def main(argv: list[str]) -> None:
    program = argv[argv.index("--") + 1:]
    try:
        plan = LaunchPlan.from_json(argv[0])
        enter(plan)
    except (OSError, PlanError) as exc:
        # the supervisor reads this line from the worker's output and names the failing layer
        print(f"autograd-lab sandbox launcher failed: {exc}", file=sys.stderr, flush=True)
        os._exit(70)
    # the worker's stderr is its stdout: the launcher's own stderr (shared with `unshare`) is
    # the supervisor's, and no process of the run may hold it (child.py reads unshare's lines
    # on how the worker ended there, words a script must not be able to write)
    launcher_stderr = os.dup(2)
    os.set_inheritable(launcher_stderr, False)
    os.dup2(1, 2)
    try:
        os.execve(program[0], program, plan.env)
    except OSError as exc:
        os.write(launcher_stderr, f"autograd-lab sandbox launcher failed: cannot start "
                 f"{program[0]}: {exc}\n".encode())
        os._exit(70)


if __name__ == "__main__":
    main(sys.argv[1:])
