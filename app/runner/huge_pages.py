"""The fork server's memory in huge pages, so that forking a run and ending it is cheap.

Once torch, numpy, matplotlib and the tracer are loaded, the fork server holds about 240 MB
of its own (Python's objects and torch's tables), in 4 KB pages: each run's fork copies some
60,000 page-table entries and its exit tears them down again, twice per run (the fork server
forks the run's parent, which forks the run into its PID namespace). That is most of a small
run's kernel time, and it does not scale: two runs forking at once on two cores each took
half as long again (the kernel's memory bookkeeping is shared). Collapsed into 2 MB pages
(`madvise(MADV_COLLAPSE)`, Linux 6.1), the same memory is about 120 entries: on this machine a
fork and exit of the fork server went from 3.5 ms to 1.7 ms, and stayed 1.7 ms with two at
once (bench/scale_out.py measures the whole line).

A run that writes to a huge page it shares with the fork server still copies only the 4 KB it
writes (the kernel splits the mapping in the run, not in the fork server), so a run's memory
and its limits are what they were. What the fork server itself writes while a run shares its
memory (serving the request: about 30 MB of it) is split back into small pages once, at its
first run; the rest stays huge (tests/runner/test_fork_server.py). Where the kernel cannot
(older than 6.1, huge pages turned off), nothing changes and the fork server says why.

Torch-free: called by the fork server after it has loaded everything, before its first fork.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
from pathlib import Path

__all__ = ["collapse_own_memory", "huge_mb"]

MADV_COLLAPSE = 25
HUGE = 2 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)


def _own_anonymous() -> list[tuple[int, int]]:
    """This process's writable private memory that no file backs (its heap and the anonymous
    maps Python's allocator and torch make): [start, end) in whole huge pages."""
    spans = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split()
        perms, name = parts[1], parts[5] if len(parts) > 5 else ""
        if not (perms.startswith("rw") and perms.endswith("p")):
            continue
        if name not in ("", "[heap]") and not name.startswith("[anon:"):
            continue  # a file's data, the stack, vdso: not ours to move
        low, high = (int(x, 16) for x in parts[0].split("-"))
        start, end = -(-low // HUGE) * HUGE, high // HUGE * HUGE
        if end > start:
            spans.append((start, end))
    return spans


def huge_mb(pid: int | str = "self") -> int:
    """MB of a process's anonymous memory in huge pages (its smaps_rollup)."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    found = re.search(r"^AnonHugePages:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) // 1024 if found else 0


def collapse_own_memory() -> tuple[int, str | None]:
    """Collapse this process's anonymous memory into huge pages. Returns (MB now in huge
    pages, None) or (0, why not). A span the kernel cannot collapse (no 2 MB page free just
    now) stays as it was."""
    refused = 0
    for start, end in _own_anonymous():
        if _libc.madvise(start, end - start, MADV_COLLAPSE) != 0:
            refused = ctypes.get_errno()  # this span stays in small pages; the rest go on
    collapsed = huge_mb()
    if collapsed:
        return collapsed, None
    if refused == errno.EINVAL:
        return 0, ("this kernel cannot collapse memory into huge pages (MADV_COLLAPSE needs "
                   f"Linux 6.1; this is {os.uname().release}), or huge pages are turned off")
    if refused == errno.EPERM:
        return 0, "huge pages are turned off for this process"
    return 0, "the kernel had no huge pages free"
