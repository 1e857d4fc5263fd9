"""Landlock, the Linux LSM that lets an unprivileged process take rights away from itself.

Called inside the worker once torch and the tracer are imported: from then on the process may
read only the paths it was given, write only in its run folder, execute nothing, and (ABI 4+)
neither bind nor connect TCP sockets; with ABI 6+ it may not signal processes outside its own
domain nor reach abstract Unix sockets outside it. The ruleset cannot be lifted again, and every
child inherits it.

Plain ctypes over the three syscalls (x86_64 and aarch64 share the numbers 444-446), so that no
package is needed. Torch-free.
"""

from __future__ import annotations

import ctypes
import os
import platform

__all__ = ["LandlockUnavailable", "abi_version", "restrict"]

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem rights, by the ABI that introduced them
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
              5: (1 << 16) - 1}
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # valid on a file rule
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6

READ = READ_FILE | READ_DIR
READ_WRITE = ((1 << 16) - 1) & ~EXECUTE & ~IOCTL_DEV & ~MAKE_CHAR & ~MAKE_BLOCK


class LandlockUnavailable(OSError):
    """The kernel (or the architecture, or a seccomp filter) does not offer Landlock."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _syscall(number: int, *args) -> int:
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when it offers none."""
    if platform.machine() not in ("x86_64", "aarch64", "riscv64"):
        return 0
    try:
        return _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def restrict(read: list[str], write: list[str], read_files: list[str] = (),
             write_files: list[str] = (), device_files: list[str] = ()) -> dict:
    """Confine this process (and its future children) for good.

    `read`: directories readable beneath; `write`: directories fully usable beneath (but never
    executable); `read_files` / `write_files`: single files; `device_files`: devices that may
    also be driven with ioctl (a GPU's). Paths that do not exist are skipped.
    Nothing may be executed anywhere. Returns what was enforced, for the sandbox report.
    """
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable("the kernel offers no Landlock (Linux 5.13+ with lsm=landlock)")
    handled_fs = _FS_BY_ABI[min(abi, 5)]
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    if abi >= 4:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP  # no rule: no TCP at all
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                       ctypes.c_uint32(0))
    granted: dict[str, list[str]] = {"read": [], "write": []}
    try:
        for paths, rights, kind in ((read, READ, "read"), (write, READ_WRITE, "write"),
                                    (read_files, READ_FILE, "read"),
                                    (write_files, READ_FILE | WRITE_FILE, "write"),
                                    (device_files, READ_FILE | WRITE_FILE | IOCTL_DEV, "write")):
            for path in paths:
                if _add_path(ruleset, path, rights & handled_fs):
                    granted[kind].append(path)
        # Landlock requires no_new_privs (or CAP_SYS_ADMIN); it is wanted here anyway
        _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return {"abi": abi, "network": abi >= 4, "scoped": abi >= 6, **granted}


def _add_path(ruleset: int, path: str, rights: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(rights, fd)
        _syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                 ctypes.byref(rule), ctypes.c_uint32(0))
        return True
    finally:
        os.close(fd)
