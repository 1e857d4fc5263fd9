"""Run one script in a sandboxed worker and return its Trace document.

The caller never imports the script or torch: everything comes back as JSON through a file in
the run's own folder. Whatever happens to the worker (an exception, a crash, a limit, a run
past the wall-clock limit), the caller gets a document whose `error` says what to do.

`trace_in_sandbox` takes a pre-started worker from `pool` when one is ready within `wait`
seconds, and starts a fresh worker otherwise: the same sandbox and the same code path either
way, so a burst is slower but never refused here. A run whose failure is explained with an edit
runs once more with the edit (fix_trial.py), so that the fix it offers is one that was run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from app.format import Trace

from . import sandbox
from .child import START_TIMEOUT, Child, Outcome
from .explain import to_document
from .fix_trial import fixes_to_try, forget_trials, try_fixes
from .fork_server import ForkServer
from .pool import Pool
from .preload import needs_plotting, needs_warm_up
from .protocol import PARTIAL_FILE, RESULT_FILE, Job, worker_env
from .start_failures import START_FAILURES, StartFailures

DEFAULT_TIMEOUT = 60.0
# workers tried for one run when each ends before its READY line (none of the script has run:
# a launcher that failed, a worker killed while importing torch). Each failure is fast, and
# one that keeps happening is the machine's, told as such (SandboxFailed) rather than retried
START_ATTEMPTS = 3

log = logging.getLogger("autograd_lab.runner")

__all__ = ["DEFAULT_TIMEOUT", "probe_devices", "trace_in", "trace_in_sandbox"]


def _script_file(name: str) -> str:
    """The script's file name in the run folder: its own base name, unless that could clash
    with the worker's files or hide as a dotfile."""
    base = Path(name).name
    if not base or base.startswith(".") or base in (RESULT_FILE, PARTIAL_FILE) \
            or len(base) > 100:
        return "script.py"
    return base


def trace_in_sandbox(script: Path | None = None, *, source: str | None = None,
                     name: str | None = None, args: list[str] | tuple[str, ...] = (),
                     device: str = "cpu", timeout: float = DEFAULT_TIMEOUT, max_events: int = 10,
                     policy: sandbox.Policy | None = None, pool: Pool | None = None,
                     wait: float = 5.0,
                     started: Callable[[Child], None] | None = None,
                     fork_server: ForkServer | None = None, threads: int = 1,
                     watch_all: bool = False,
                     start_failures: StartFailures = START_FAILURES,
                     cancel: threading.Event | None = None) -> Trace:
    """Trace a script given as a path or as source text; always returns a Trace document.

    With a running `pool` (and no `policy` of its own), a pre-started worker of the pool's is
    used if one is ready within `wait` seconds; a fresh one is forked from `fork_server` when it is
    ready, exec'd otherwise. `started(child)` is told the worker before the job goes to it:
    `child.stop()` from another thread ends the run. `watch_all`: every operation is watched
    to the end, not only through the kept passes (slower; a late failure is then explained).
    A worker that ends before its READY line is replaced (trace_in) and counted in
    `start_failures` (the web server's own, for its metrics; this process's by default).
    `cancel`, set when the run is stopped, ends the wait for a worker: for a pooled one, and for
    a fork server still importing torch (seconds, tens of seconds on a loaded machine). A run
    stopped before it had a worker is told Stopped without one being started."""
    if (script is None) == (source is None):
        raise ValueError("give either a script path or its source")
    if script is not None:
        script = Path(script)
        source = script.read_text(encoding="utf-8", errors="replace")
        name = name or script.name
    name = name or "script.py"
    run_policy = policy or (pool.policy if pool is not None else sandbox.Policy())
    # an exec'd worker started for this script loads matplotlib only if it may be used
    plotting = needs_plotting(source)
    # and steps each common optimizer first only if it may; a run on a GPU always: the
    # step's imports start CUDA's driver before the sandbox closes, and a worker without
    # them found no GPU inside it (DeviceUnavailable, seen on an H100)
    warm_up = needs_warm_up(source) or device != "cpu"

    def fresh() -> Child:
        return Child.spawn(run_policy, fork_server=fork_server, plotting=plotting,
                           warm_up=warm_up)

    def exec_afresh() -> Child:
        # in place of one that ended before READY: exec'd, whatever the fork server it may
        # have come from is going through (seconds of CPU, only when something failed)
        return Child.spawn(run_policy, plotting=plotting, warm_up=warm_up)

    child = None
    if pool is not None and policy is None and pool.running:
        child = pool.acquire(timeout=wait, cancel=cancel)
    if child is None and fork_server is not None and fork_server.started():
        fork_server.settle(cancel=cancel)  # the stop is heard while it imports torch
    if child is None and cancel is not None and cancel.is_set():
        return stopped_before_a_worker(source=source, name=name, args=args, device=device,
                                       timeout=timeout, limits=run_policy.limits)
    if child is None:
        child = fresh()
    doc = trace_in(child, source=source, name=name, args=args, device=device, timeout=timeout,
                   max_events=max_events, threads=threads, watch_all=watch_all,
                   respawn=exec_afresh, started=started, start_failures=start_failures)
    forget_trials(doc)  # a trial is the server's to run: a report's own claim is dropped
    if fixes_to_try(doc):
        # the fix the page will offer, run first (fix_trial.py): in a worker of its own, with
        # the same limits, stopped with the run if its person stops it
        def again(edited: str) -> Trace:
            trial = Child.spawn(run_policy, fork_server=fork_server,
                                plotting=plotting or needs_plotting(edited),
                                warm_up=warm_up or needs_warm_up(edited))
            return trace_in(trial, source=edited, name=name, args=args, device=device,
                            timeout=timeout, max_events=max_events, threads=threads,
                            watch_all=watch_all, respawn=exec_afresh, started=started,
                            start_failures=start_failures)

        try_fixes(doc, source, again)
    return doc


def stopped_before_a_worker(*, source: str, name: str, args, device: str, timeout: float,
                            limits) -> Trace:
    """The Trace of a run stopped while it waited for a worker: Stopped, none of it ran."""
    job = Job(script=_script_file(name), name=name, device=device, args=list(args),
              timeout=timeout)
    outcome = Outcome(document=None, returncode=None, timed_out=False, elapsed=0.0, log="",
                      log_bytes=0, stopped=True, ready=False)
    return to_document(outcome, job=job, source=source, limits=limits)


def plain_threads(device: str = "cpu") -> int:
    """The threads torch gives a plain `python script.py` here: one per core this process may
    use. A run that has the machine to itself gets as many; on a GPU, one: a sandboxed worker
    given an H100 machine's 16 died of SIGSEGV in a 512-wide linear on CUDA, and with one ran
    it (2026-11-26; with rlimits off it still died; the cause is not known)."""
    if device != "cpu":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def trace_in(child: Child, *, source: str, name: str, args=(), device: str = "cpu",
             timeout: float = DEFAULT_TIMEOUT, max_events: int = 10, threads: int = 1,
             watch_all: bool = False, respawn: Callable[[], Child] | None = None,
             started: Callable[[Child], None] | None = None,
             start_failures: StartFailures = START_FAILURES,
             start_timeout: float = START_TIMEOUT) -> Trace:
    """Give one job to `child` (fresh or pre-started) and make its Trace document; `threads`:
    torch's for the script (1 unless the run has the machine to itself). A worker that ends
    before its READY line is replaced by `respawn()`, up to START_ATTEMPTS workers in all;
    `started` is told each worker before its job goes to it."""
    script_file = _script_file(name)
    job = Job(script=script_file, name=name, device=device, args=list(args),
              max_events=max_events, timeout=timeout, threads=threads, watch_all=watch_all)
    starts = 1
    while True:
        if started is not None:
            started(child)
        outcome = child.execute(job, {script_file: source}, timeout,
                                start_timeout=start_timeout)
        if outcome.ready:
            start_failures.started()
        # one still starting after START_TIMEOUT is not tried again: its person has waited
        if outcome.ready or outcome.stopped or outcome.slow_start or respawn is None or \
                starts >= START_ATTEMPTS:
            break
        start_failures.record("run", outcome.log)
        log.warning("a run's worker ended before it was ready (try %d of %d), starting "
                    "another: %s", starts, START_ATTEMPTS, outcome.log[-500:])
        starts += 1
        child = respawn()
    if not outcome.ready and not outcome.stopped:
        start_failures.record("gave_up", outcome.log)
        log.error("no worker could be started for a run (%d tried): %s", starts,
                  outcome.log[-2000:])
    outcome.starts = starts
    return to_document(outcome, job=job, source=source, limits=child.policy.limits)


def probe_devices(timeout: float = 60.0) -> dict:
    """{"torch": version, "devices": [...]} as a worker process sees them."""
    done = subprocess.run([sys.executable, "-m", "app.trace.devices"], capture_output=True,
                          env=worker_env(Path("/tmp")), timeout=timeout, check=False, text=True)
    if done.returncode != 0:
        raise RuntimeError("the worker could not start torch: " + done.stderr.strip()[-2000:])
    return json.loads(done.stdout)
