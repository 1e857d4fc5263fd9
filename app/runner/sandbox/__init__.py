"""The sandbox every run goes through: which layers this machine offers, and the plan for one
worker (the launcher's and the worker's instructions).

Layers, each standing on its own:
- exec: a freshly exec'd worker per run (Popen, never a fork of the server) - always;
- namespaces: new network, PID, IPC and mount namespaces (`namespaces.py`);
- uid: an unprivileged uid of the run's own when the server is root (`identity.py`);
- rlimits: CPU time, address space, file size, open files, processes (`rlimits.py`);
- cgroups: memory and process count of the whole run, killed as one (`cgroups.py`);
- landlock: read-only interpreter, writable run folder only, no exec, no TCP (`landlock.py`);
- own_root: a root holding only what the run needs, so no socket of the machine by its path
  (`own_root.py`, in the namespaces' mount namespace);
- seccomp: no namespaces, keyrings, sockets but AF_UNIX, bpf, perf, io_uring, ptrace,
  mounts (`seccomp.py`);
- environment: nothing of the server's environment reaches the script;
- output, wall clock, result: enforced by the supervisor (`app/runner/child.py`).
Torch-free: the web process imports this.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field

from ..protocol import app_root
from . import cgroups, identity, landlock, namespaces, seccomp
from .rlimits import ResourceLimits

__all__ = ["ResourceLimits", "Policy", "availability", "effective", "paths_to_expose"]


@dataclass(frozen=True)
class Policy:
    """Which layers to use (each only where available) and the limits of one run."""
    namespaces: bool = True
    own_uid: bool = True
    landlock: bool = True
    seccomp: bool = True
    rlimits: bool = True
    cgroups: bool = True
    nice: int = 0  # CPU priority of the run (uploads go after scenarios)
    limits: ResourceLimits = field(default_factory=ResourceLimits)


def paths_to_expose(app_folder_only: bool = False) -> list[str]:
    """What the run's uid must reach to start Python and import the worker (with
    `app_folder_only`, the app's package folder rather than the checkout holding it: a run's
    own root holds nothing else of the checkout)."""
    found = []
    app = app_root() / "app" if app_folder_only else app_root()
    for p in (sys.base_prefix, sys.prefix, os.path.realpath(sys.executable), str(app)):
        real = os.path.realpath(p)
        if real not in found:
            found.append(real)
    return found


@functools.lru_cache(maxsize=1)
def availability() -> dict[str, dict]:
    """{layer: {"available": bool, "detail": why}} for this machine, probed once."""
    ns_ok, ns_detail = namespaces.check()
    uid_ok, uid_detail = identity.can_switch()
    blocked = {}
    if uid_ok:
        blocked = identity.blocked_ancestors(paths_to_expose(), identity.UID_BASE,
                                             identity.UID_BASE)
        if blocked and not ns_ok:
            uid_ok = False
            uid_detail = (f"the interpreter is below {', '.join(blocked)}, which an unprivileged "
                          "uid cannot enter, and without a mount namespace it cannot be exposed")
        elif blocked:
            uid_detail += f" ({', '.join(blocked)} exposed read-only in the run's mount namespace)"
    cg_ok, cg_detail = cgroups.available()
    sc_ok, sc_detail = seccomp.available()
    abi = landlock.abi_version()
    ll_detail = (f"Landlock ABI {abi}" + ("" if abi >= 4 else " (no TCP rules before ABI 4)")
                 if abi else "the kernel offers no Landlock (Linux 5.13+, lsm=landlock)")
    return {
        "exec": {"available": True, "detail": "every run is a freshly exec'd Python worker"},
        "namespaces": {"available": ns_ok, "detail": ns_detail},
        "uid": {"available": uid_ok, "detail": uid_detail, "needs_mount_ns": bool(
            uid_ok and blocked)},
        "rlimits": {"available": True, "detail": "setrlimit"},
        "cgroups": {"available": cg_ok, "detail": cg_detail},
        "landlock": {"available": abi > 0, "detail": ll_detail},
        "seccomp": {"available": sc_ok, "detail": sc_detail},
        "own_root": {"available": ns_ok, "detail": (
            "a root of the run's own (pivot_root): only the interpreter, the packages, the "
            "app, the run's folder and the system's libraries" if ns_ok else
            "needs a mount namespace: " + ns_detail)},
        "environment": {"available": True, "detail": "the worker gets a fixed, minimal env"},
    }


def effective(policy: Policy) -> dict[str, bool]:
    avail = availability()
    ns = policy.namespaces and avail["namespaces"]["available"]
    return {"namespaces": ns,
            # an interpreter below /root is reachable for the run's uid only through the
            # mount namespace: without it, the run keeps the server's uid
            "uid": policy.own_uid and avail["uid"]["available"] and
            (ns or not avail["uid"]["needs_mount_ns"]),
            "landlock": policy.landlock and avail["landlock"]["available"],
            "seccomp": policy.seccomp and avail["seccomp"]["available"],
            "rlimits": policy.rlimits,
            "cgroups": policy.cgroups and avail["cgroups"]["available"]}
