"""The start-up self-test: does each sandbox layer hold on this machine, on its own?

Each layer is tried alone (the others turned off) with a probe worker (no torch: a fraction of
a second each) that attempts what that layer must stop; the supervisor's own duties (wall
clock, killing a detached child, output and result caps, the empty environment) are tried with
every layer on. A server keeps its `SelfTest` (started in the background at start-up) in its
app state; its `report()` is what /healthz and the page show, and the server logs each missing
layer. Torch-free.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import sandbox
from .child import MAX_LOG, Child
from .fork_server import ForkServer
from .protocol import ALLOWED_ENV, Job
from .sandbox import identity, namespaces
from .sandboxed_trace import trace_in

FORK_SERVER_WAIT = 180.0  # the fork server imports torch first

__all__ = ["SelfTest", "run_selftest"]

log = logging.getLogger("autograd_lab.runner.selftest")
PROBE = "app.runner.selftest_worker"


# the fork server the probes are forked from, when the server has one (run_selftest)
_fork_server: ForkServer | None = None


def _probe(policy: sandbox.Policy, job: dict, timeout: float = 20.0, **kw):
    child = Child.spawn(policy, program=PROBE, fork_server=_fork_server)
    uid = child.uid
    outcome = child.execute(Job(extra=job), {}, timeout, start_timeout=30.0, **kw)
    left = identity.processes_of(uid) if uid is not None else []
    return outcome, left


def _checks(outcome) -> dict:
    doc = outcome.document or {}
    if "checks" not in doc:
        return {"probe": {"held": False, "detail": "the probe did not report: " +
                          outcome.log[-500:]}}
    return doc["checks"]


def _layer_landlock(ctx: dict) -> dict:
    policy = sandbox.Policy(namespaces=False, own_uid=False, landlock=True, rlimits=False,
                            seccomp=False)
    outcome, _ = _probe(policy, {**ctx, "checks": ["read_passwd", "read_app", "write_outside",
                                                    "exec", "connect"]})
    return _checks(outcome)


def _layer_namespaces(ctx: dict) -> dict:
    policy = sandbox.Policy(namespaces=True, own_uid=False, landlock=False, rlimits=False,
                            seccomp=False)
    outcome, _ = _probe(policy, {**ctx, "checks": ["connect", "pid"]})
    checks = _checks(outcome)
    for kind, own in outcome.status.get("namespaces", {}).items():
        checks[f"{kind}_namespace"] = {"held": own, "detail": "own namespace" if own else
                                       "shares the server's namespace"}
    return checks


def _layer_uid(ctx: dict) -> dict:
    policy = sandbox.Policy(own_uid=True, landlock=False, rlimits=False, seccomp=False)
    outcome, _ = _probe(policy, {**ctx, "checks": ["uid", "write_outside"]})
    return _checks(outcome)


def _layer_rlimits(ctx: dict) -> dict:
    policy = sandbox.Policy(landlock=False, rlimits=True, cgroups=False, seccomp=False)
    names = ["memory", "open_files", "file_size"]
    layers = sandbox.effective(policy)
    if layers["uid"] or (layers["namespaces"] and namespaces.in_user_namespace()):
        # the process cap counts per uid and user namespace: the run's own uid, or its own
        # user namespace when the server is not root
        names.append("processes")
    if layers["namespaces"]:
        names.append("folder_size")  # a private tmpfs: needs a mount namespace
    outcome, _ = _probe(policy, {**ctx, "checks": names})
    return _checks(outcome)


def _layer_seccomp(ctx: dict) -> dict:
    """The filter alone: a new user namespace, a key in the user keyring (which would outlive
    the run), a netlink socket and bpf are refused (the namespace last: were it allowed, the
    probe would be in it)."""
    policy = sandbox.Policy(namespaces=False, own_uid=False, landlock=False, rlimits=False,
                            cgroups=False, seccomp=True)
    outcome, _ = _probe(policy, {**ctx, "checks": ["keyring", "netlink_socket", "bpf",
                                                    "new_user_namespace"]})
    checks = _checks(outcome)
    enforced = outcome.status.get("seccomp", {})
    if not enforced.get("enforced"):
        checks["filter"] = {"held": False, "detail": f"not installed: {enforced}"}
    return checks


def _layer_own_root(ctx: dict) -> dict:
    """The run's root alone (with the namespaces it is made in): a Unix socket the self-test
    listens on by path is out of reach, and so is the machine's cgroup tree."""
    policy = sandbox.Policy(namespaces=True, own_uid=False, landlock=False, rlimits=False,
                            seccomp=False)
    outcome, _ = _probe(policy, {**ctx, "checks": ["host_socket", "cgroup_tree"]})
    return _checks(outcome)


def _layer_cgroups(ctx: dict) -> dict:
    """The run's cgroup alone: its processes together may not pass its memory or its process
    count (small limits, so the check is quick), and the sleepers it leaves are killed."""
    limits = sandbox.ResourceLimits(run_memory_mb=256, processes=16)
    policy = sandbox.Policy(namespaces=False, own_uid=False, landlock=False, rlimits=False,
                            cgroups=True, seccomp=False, limits=limits)
    outcome, _ = _probe(policy, {**ctx, "checks": ["run_memory", "processes"],
                                 "child_mb": limits.run_memory_mb // 2})
    checks = _checks(outcome)
    left = outcome.status.get("cgroup_left", [])
    checks["killed_as_one"] = {"held": not left, "detail": "nothing left alive" if not left
                               else f"left alive: {left}"}
    return checks


def _supervisor(ctx: dict) -> dict:
    """With every layer on: environment, output cap, wall clock and a detached child."""
    policy = sandbox.Policy()
    timeout = 1.5
    outcome, left = _probe(policy, {**ctx, "checks": ["env", "output"],
                                    "detach_and_sleep": True}, timeout=timeout)
    checks = {}
    checks["wall_clock"] = {"held": outcome.timed_out and outcome.elapsed < timeout + 10,
                            "detail": f"stopped after {outcome.elapsed:.1f} s (limit {timeout} s)"}
    checks["process_tree"] = {"held": not left, "detail": "nothing left alive" if not left
                              else f"left alive: {left}"}
    checks["output_cap"] = {"held": len(outcome.log) <= MAX_LOG and outcome.log_bytes > MAX_LOG,
                            "detail": f"kept {len(outcome.log)} of {outcome.log_bytes} bytes"}
    # a probe whose report is padded past a 4 KiB cap: the supervisor must refuse to read it
    outcome2, _ = _probe(policy, {**ctx, "checks": ["env"], "pad": 8192}, max_result=4096)
    checks["result_cap"] = {"held": outcome2.too_large and outcome2.document is None,
                            "detail": "a result over the cap was refused" if outcome2.too_large
                            else "an oversized result was accepted"}
    checks.update(_worker(ctx))
    return checks


_HOSTILE_TRACE = """\
import torch
x = torch.ones(2, requires_grad=True)
(x * x).sum().backward()
print(open('/etc/shadow').read())
"""


def _worker(ctx: dict) -> dict:
    """The real worker (torch, tracer) end to end: it traces, and its sandbox is closed."""
    doc = trace_in(Child.spawn(sandbox.Policy(), fork_server=_fork_server), source=_HOSTILE_TRACE,
                   name="selftest.py",
                 timeout=30)
    err = doc.get("error") or {}
    landlock_on = sandbox.effective(sandbox.Policy())["landlock"]
    # refused by Landlock, or not even there (the run's own root holds no /etc/shadow)
    confined = err.get("type") in ("PermissionError", "FileNotFoundError") and \
        err.get("line") == 4
    events = len(doc.get("events", []))
    filtered = doc.get("sandbox", {}).get("seccomp", {})
    seccomp_on = sandbox.effective(sandbox.Policy())["seccomp"]
    return {"worker_filtered": {"held": bool(filtered.get("enforced")) or not seccomp_on,
                                "detail": f"the worker's seccomp filter: {filtered}"},
            "worker_traces": {"held": events == 1, "detail": f"{events} backward event(s)"},
            "worker_confined": {"held": confined or not landlock_on,
                                "detail": f"{err.get('type')}: {err.get('message', '')[:120]}"}}


def _environment(ctx: dict) -> dict:
    outcome, _ = _probe(sandbox.Policy(), {**ctx, "checks": ["env"]})
    checks = _checks(outcome)
    if "env" in checks:
        names = set(json.loads(checks["env"]["detail"]))
        extra = sorted(names - ALLOWED_ENV)
        checks["env"] = {"held": not extra, "detail": "only " + ", ".join(sorted(names))
                         if not extra else f"server variables leaked: {extra}"}
    return checks


_LAYERS = {"landlock": _layer_landlock, "seccomp": _layer_seccomp, "own_root": _layer_own_root,
           "namespaces": _layer_namespaces, "uid": _layer_uid,
           "rlimits": _layer_rlimits, "cgroups": _layer_cgroups, "environment": _environment,
           "supervisor": _supervisor}


def run_selftest(fork_server: ForkServer | None = None) -> dict:
    """Try every available layer; returns the report. With a `fork_server`, the probes are forked
    from it, as the runs will be (it is waited for until it is ready or has failed)."""
    global _fork_server
    if fork_server is not None:
        fork_server.settle(FORK_SERVER_WAIT)
    _fork_server = fork_server if fork_server is not None and fork_server.usable() else None
    started = time.monotonic()
    avail = sandbox.availability()
    outside = tempfile.mkdtemp(prefix="autograd-lab-selftest-")  # root's, 0700 -> 0755
    os.chmod(outside, 0o755)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    # a socket by path that anyone may connect to, as a desktop's D-Bus or X11 one is
    unix_path = os.path.join(outside, "host.sock")
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix_listener.listen(8)
    ctx = {"outside_dir": outside, "port": listener.getsockname()[1], "unix_socket": unix_path}
    layers: dict[str, dict] = {}
    try:
        todo = {name: fn for name, fn in _LAYERS.items()
                if name not in avail or avail[name]["available"]}
        with ThreadPoolExecutor(max_workers=len(todo)) as ex:
            futures = {name: ex.submit(fn, ctx) for name, fn in todo.items()}
            for name, future in futures.items():
                try:
                    layers[name] = {"checks": future.result()}
                except Exception as exc:  # noqa: BLE001 - a broken layer is a finding
                    layers[name] = {"checks": {"probe": {"held": False, "detail": repr(exc)}}}
        escaped = [n for n in os.listdir(outside) if n != "host.sock"]
        if escaped:
            layers.setdefault("supervisor", {"checks": {}})["checks"]["no_escape"] = {
                "held": False, "detail": f"files written outside the run folder: {escaped}"}
    finally:
        listener.close()
        unix_listener.close()
        for name in os.listdir(outside):
            os.unlink(os.path.join(outside, name))
        os.rmdir(outside)
    report_layers = {}
    for name in [*avail, "supervisor"]:
        info = dict(avail.get(name, {"available": True, "detail": "the server's supervision"}))
        checks = layers.get(name, {}).get("checks", {})
        info["checks"] = checks
        if name == "exec":
            info["holds"] = True
            if fork_server is not None:
                info["detail"] = fork_server.describe()
        elif not info["available"]:
            info["holds"] = None
        else:
            info["holds"] = bool(checks) and all(c["held"] for c in checks.values())
        report_layers[name] = info
    missing = [n for n, i in report_layers.items() if not i["available"]]
    failing = [n for n, i in report_layers.items() if i["available"] and not i["holds"]]
    report = {"ok": not missing and not failing, "missing": missing, "failing": failing,
              "layers": report_layers, "duration_s": round(time.monotonic() - started, 2),
              "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    report["summary"] = ("every sandbox layer is in place and held in the self-test"
                         if report["ok"] else _summary(report_layers, missing, failing))
    for name in missing:
        log.warning("sandbox layer %s is unavailable: %s", name,
                    report_layers[name]["detail"])
    for name in failing:
        bad = {k: c["detail"] for k, c in report_layers[name]["checks"].items() if not c["held"]}
        log.error("sandbox layer %s did not hold in the self-test: %s", name, bad)
    return report


def _summary(layers: dict, missing: list[str], failing: list[str]) -> str:
    parts = [f"{n} unavailable ({layers[n]['detail']})" for n in missing]
    parts += [f"{n} did not hold" for n in failing]
    return "sandbox incomplete: " + "; ".join(parts)


class SelfTest:
    """One server's self-test: started once, in the background, its report kept.

    `report` is None until it is done; one given to the constructor counts as done (a report
    from an earlier run, or one a test states). With a `fork_server`, the probes go through it."""

    def __init__(self, report: dict | None = None, fork_server: ForkServer | None = None) -> None:
        self._report = report
        self.fork_server = fork_server
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> SelfTest:
        with self._lock:
            if self._thread is None and self._report is None:
                self._thread = threading.Thread(target=self._run, name="autograd-lab-selftest",
                                                daemon=True)
                self._thread.start()
        return self

    def _run(self) -> None:
        report = run_selftest(self.fork_server)  # logs each layer that is missing or did not hold
        with self._lock:
            self._report = report

    def report(self) -> dict | None:
        with self._lock:
            return self._report

