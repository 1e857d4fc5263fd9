"""An unprivileged uid of its own for every run (when the server runs as root).

Each worker gets a uid no account and no file uses, from a small reserved range, so that:
- the process cap (RLIMIT_NPROC counts per uid) of one run never starves another;
- runs cannot signal or ptrace each other, nor touch anything root or a user owns;
- "every process of this uid" is exactly "every process of this run": the supervisor kills
  them all at the end, a catch-all that holds even without a PID namespace.
Uids are handed out through lock files, so several server processes on one machine never
share one.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

__all__ = [
    "NoFreeUid",
    "UID_BASE",
    "UID_COUNT",
    "UidLease",
    "blocked_ancestors",
    "can_switch",
    "kill_all",
    "lease_uid",
    "prepare_run_dir",
    "processes_of",
]

UID_BASE = int(os.environ.get("AUTOGRAD_LAB_UID_BASE", "3500000000"))
# a test makes the range small to see a uid used again by a later run (tests/web/
# test_strangers_server.py); a server uses all of it
UID_COUNT = int(os.environ.get("AUTOGRAD_LAB_UID_COUNT", "4096"))


class NoFreeUid(RuntimeError):
    """Every sandbox uid is held by a run: the server is at its limit for now."""


def can_switch() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, (f"the server runs as uid {os.geteuid()}, not root: each run is root of "
                       "a user namespace of its own that maps it to the server's uid, and no "
                       "other (subordinate uids from /etc/subuid are not used); started as "
                       "root, the server gives each run a uid of its own")
    return True, f"each run gets its own uid from {UID_BASE}-{UID_BASE + UID_COUNT - 1}"


class UidLease:
    """One uid held for one run; `release()` (after the run's processes are gone) frees it."""

    def __init__(self, uid: int, fd: int) -> None:
        self.uid = self.gid = uid
        self._fd = fd

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing drops the flock
            self._fd = -1


# where a root server keeps its uid locks: /run is root's, so no other user can have made the
# folder first (in /tmp, another user's folder of that name once stopped a root server from
# starting); every server process of the machine shares it, as the uids are the machine's
RUN_STATE = Path("/run/autograd-lab")


def _lock_base() -> Path:
    """/run/autograd-lab where this process may make it (root), else the temporary folder."""
    if os.geteuid() == 0 and RUN_STATE.parent.is_dir():
        try:
            RUN_STATE.mkdir(mode=0o700, exist_ok=True)
            return RUN_STATE
        except OSError:
            pass
    return Path(tempfile.gettempdir())


def _lock_dir(base: Path | None = None) -> Path:
    """The folder of uid lock files, in `_lock_base()`. Where that is /tmp, everyone's, someone
    could have made it first (a symlink to elsewhere, or a folder they own and can fill with
    locks that hold every uid), so it is used only if it is a real folder of ours that nobody
    else may write."""
    path = Path(base or _lock_base()) / "autograd-lab-uids"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else f"owner uid {st.st_uid}, mode " \
            f"{stat.S_IMODE(st.st_mode):o}"
        raise RuntimeError(f"the sandbox's uid lock folder {path} is not the server's own "
                           f"({kind}): remove it, and the server makes its own")
    return path


_next = os.getpid() % UID_COUNT  # spread the search start between server processes


def lease_uid() -> UidLease:
    """A uid no other run holds (its lock file, flock'ed, is the lease). Runs start on several
    threads at once: the search starts from one snapshot of `_next`, or a thread that another
    moved on under it tries the same uid twice and misses the free one (NoFreeUid with a uid
    free: seen with two)."""
    global _next
    folder = _lock_dir()
    start = _next
    for i in range(UID_COUNT):
        uid = UID_BASE + (start + i) % UID_COUNT
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        _next = (start + i + 1) % UID_COUNT
        kill_all(uid)  # a server that crashed may have left one behind
        return UidLease(uid, fd)
    raise NoFreeUid(f"every one of the server's {UID_COUNT:,} sandbox identities is held by "
                    "a run")


def _sandbox_uid(path: str) -> int | None:
    try:
        uid = os.lstat(path).st_uid
    except OSError:
        return None
    return uid if UID_BASE <= uid < UID_BASE + UID_COUNT else None


def sweep_orphans() -> list[int]:
    """Kill what runs under a sandbox uid that no live server holds, and remove its run
    folders (its server was killed while a script slept): a uid's lock is free exactly when
    no process holds its lease."""
    uids: set[int] = set()
    folders: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        uid = _sandbox_uid(f"/proc/{entry}") if entry.isdigit() else None
        if uid is not None:
            uids.add(uid)
    tmp = tempfile.gettempdir()
    for entry in os.listdir(tmp):
        if entry.startswith("autograd-lab-run-"):
            uid = _sandbox_uid(os.path.join(tmp, entry))
            if uid is not None:
                uids.add(uid)
                folders.setdefault(uid, []).append(os.path.join(tmp, entry))
    swept = []
    locks = _lock_dir()
    for uid in sorted(uids):
        fd = os.open(locks / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # leased: a run of a live server
        else:
            kill_all(uid)
            for path in folders.get(uid, []):
                shutil.rmtree(path, ignore_errors=True)
            swept.append(uid)
        finally:
            os.close(fd)
    return swept


def processes_of(uid: int) -> list[int]:
    """Pids of every live (not zombie) process whose real or effective uid is `uid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as f:
                for line in f:
                    if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                        break  # already dead: only its parent's wait() can remove it
                    if line.startswith("Uid:"):
                        real, effective = line.split()[1:3]
                        if uid in (int(real), int(effective)):
                            found.append(int(entry))
                        break
        except OSError:
            continue
    return found


def kill_all(uid: int, rounds: int = 20) -> int:
    """SIGKILL every process of `uid` until none is left (a fork bomb keeps forking)."""
    killed = 0
    for _ in range(rounds):
        pids = processes_of(uid)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


def _can_traverse(st: os.stat_result, uid: int, gid: int) -> bool:
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def blocked_ancestors(paths: list[str], uid: int, gid: int) -> dict[str, set[str]]:
    """{directory the uid cannot enter: {child names on the way to a needed path}}, topmost
    blocked directory per path (e.g. /root, mode 700, above a pyenv interpreter)."""
    blocked: dict[str, set[str]] = {}
    for path in paths:
        parts = Path(path).parts
        for depth in range(1, len(parts)):
            folder = str(Path(*parts[:depth]))
            try:
                st = os.stat(folder)
            except OSError:
                break
            if not _can_traverse(st, uid, gid):
                blocked.setdefault(folder, set()).add(parts[depth])
                break
    return blocked


def prepare_run_dir(path: Path, uid: int, gid: int) -> None:
    """The run folder belongs to the run's uid: the only place it can write."""
    os.chown(path, uid, gid)
    os.chmod(path, 0o700)
