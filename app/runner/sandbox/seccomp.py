"""A seccomp filter on every worker: the kernel interfaces a script has no use for are refused
before a line of it runs.

Namespaces let a process give itself full capabilities in a world of its own (and from there
reach kernel code few programs use); keyrings keep data per uid that outlives a run; raw,
netlink, vsock and other sockets reach past the network namespace's reach; bpf, perf,
userfaultfd and io_uring are the kernel's favourite attack surface; ptrace, mount and kexec
have no place in a script. Everything else (files, threads, fork, `AF_UNIX` sockets and
socketpairs, which multiprocessing uses) is left to the other layers.

Each refused call fails with EPERM (EAFNOSUPPORT for a socket family), which Python raises as
PermissionError naming the function the script called; `refusal_of` says which rule refused it
(explain.py adds that to the message). Built with libseccomp through pyseccomp (ctypes; the
library is Debian's libseccomp2, found by its soname: `_binding`).
Installed before READY, under no_new_privs, in the worker only: the launcher and the fork
server need these calls to build the sandbox. Torch-free.
"""

from __future__ import annotations

import errno
import re
import socket

__all__ = ["REFUSED", "available", "install", "preload", "refusal_of"]

# the namespace flags of clone()'s first argument: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
# NEWUSER, NEWPID, NEWNET
_NAMESPACE_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                    0x40000000)

# what a script sees refused, by why; every name must be one libseccomp knows
REFUSED: dict[str, tuple[str, ...]] = {
    "namespaces": ("unshare", "setns"),
    "keyrings": ("keyctl", "add_key", "request_key"),
    "kernel interfaces": ("bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
                          "io_uring_enter", "io_uring_register", "kexec_load",
                          "kexec_file_load", "init_module", "finit_module", "delete_module",
                          "reboot", "swapon", "swapoff", "acct", "lookup_dcookie",
                          "open_by_handle_at", "name_to_handle_at"),
    "tracing": ("ptrace", "process_vm_readv", "process_vm_writev"),
    # Landlock refuses to execute files, but not a copy of ld.so in a memfd run through
    # /proc/self/fd: the worker itself runs no program once the filter is on
    "programs": ("execve", "execveat"),
    "mounts": ("mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
               "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
}


def _binding():
    """pyseccomp, imported so that it finds libseccomp without running a program: at import it
    asks ctypes.util.find_library, which runs ldconfig or gcc, and a worker in its own root
    has neither (and may start no program). The dynamic loader finds the library by its
    soname through /etc/ld.so.cache, which the root keeps."""
    import ctypes.util

    found = ctypes.util.find_library
    ctypes.util.find_library = lambda name: "libseccomp.so.2" if name == "seccomp" \
        else found(name)
    try:
        import pyseccomp
    finally:
        ctypes.util.find_library = found
    return pyseccomp


def preload() -> None:
    """Import the binding before the script runs (a fork server does it once)."""
    try:
        _binding()
    except (ImportError, OSError, RuntimeError):
        pass  # install() says why


def available() -> tuple[bool, str]:
    try:
        _binding().system_arch()
    except (ImportError, OSError, AttributeError, RuntimeError) as exc:
        return False, f"libseccomp is not usable ({exc}): install Debian's libseccomp2"
    return True, ("a seccomp filter refuses namespaces, keyrings, sockets other than AF_UNIX, "
                  "bpf, perf, userfaultfd, io_uring, ptrace, mounts and kexec")


def install() -> dict:
    """Load the filter into this process (and whatever it starts) for good."""
    sc = _binding()
    f = sc.SyscallFilter(sc.ALLOW)
    refused = sc.ERRNO(errno.EPERM)
    for names in REFUSED.values():
        for name in names:
            f.add_rule(refused, name)
    # clone with a namespace flag; clone3 passes its flags in memory a filter cannot read, so
    # it is refused as missing and the C library falls back to clone (as container runtimes do)
    for flag in _NAMESPACE_FLAGS:  # rules for one call are or'ed: any flag refuses it
        f.add_rule(refused, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # sockets: AF_UNIX only (the others reach past the network namespace)
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, socket.AF_UNIX))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socketpair", sc.Arg(0, sc.NE, socket.AF_UNIX))
    f.load()
    return {"enforced": True, "refused": sorted(n for names in REFUSED.values() for n in names)}


def refusal_of(text: str) -> str | None:
    """Which rule refused the call on a line of the script, from the line's text (None: the
    line calls none of them by name)."""
    for why, names in REFUSED.items():
        for name in names:
            if re.search(rf"\b{name}\b", text):  # `unshare`, not `total_amount`'s "mount"
                return f"`{name}` ({why})"
    if re.search(r"\bsocket\b", text):
        return "sockets other than AF_UNIX"
    return None
