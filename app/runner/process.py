"""Run one script in a sandboxed worker and return its Trace document.

The caller never imports the script or torch: everything comes back as JSON through a file in
the run's own folder. Whatever happens to the worker (an exception, a crash, a limit, a run
past the wall-clock limit), the caller gets a document whose `error` says what to do.

`run_trace` uses the default pool's pre-started workers when a pool is running (see
`app.runner.pool`), and starts a fresh worker otherwise: the same sandbox and the same code
path either way.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from . import sandbox
from .child import Child
from .explain import to_document

DEFAULT_TIMEOUT = 60.0
START_TIMEOUT = 120.0  # importing torch takes seconds; on a loaded machine, more

__all__ = ["DEFAULT_TIMEOUT", "probe_devices", "run_in", "run_trace"]


def _script_file(name: str) -> str:
    """The script's file name in the run folder: its own base name, unless that could clash
    with the worker's files or hide as a dotfile."""
    base = Path(name).name
    if not base or base.startswith(".") or base in ("trace.json", "trace.json.partial") \
            or len(base) > 100:
        return "script.py"
    return base


def run_trace(script: Path | None = None, *, source: str | None = None, name: str | None = None,
              args: list[str] | tuple[str, ...] = (), device: str = "cpu",
              timeout: float = DEFAULT_TIMEOUT, max_events: int = 10,
              policy: sandbox.Policy | None = None) -> dict:
    """Trace a script given as a path or as source text; always returns a Trace document."""
    if (script is None) == (source is None):
        raise ValueError("give either a script path or its source")
    if script is not None:
        script = Path(script)
        source = script.read_text(encoding="utf-8", errors="replace")
        name = name or script.name
    name = name or "script.py"
    from .pool import default_pool

    pool = default_pool()
    if pool is not None and policy is None:
        return pool.run(source=source, name=name, args=args, device=device, timeout=timeout,
                        max_events=max_events)
    child = Child.spawn(policy or sandbox.Policy())
    return run_in(child, source=source, name=name, args=args, device=device, timeout=timeout,
                  max_events=max_events)


def run_in(child: Child, *, source: str, name: str, args=(), device: str = "cpu",
           timeout: float = DEFAULT_TIMEOUT, max_events: int = 10) -> dict:
    """Give one job to `child` (fresh or pre-started) and make its Trace document."""
    script_file = _script_file(name)
    job = {"script": script_file, "name": name, "device": device, "args": list(args),
           "max_events": max_events}
    outcome = child.execute(job, {script_file: source}, timeout, start_timeout=START_TIMEOUT)
    return to_document(outcome, name=name, source=source, device=device, timeout=timeout,
                       limits=child.policy.limits, script_file=script_file)


def probe_devices(timeout: float = 60.0) -> dict:
    """{"torch": version, "devices": [...]} as a worker process sees them."""
    env = sandbox.worker_env(Path("/tmp"))
    done = subprocess.run([sys.executable, "-m", "app.trace.probe"], capture_output=True,
                          env=env, timeout=timeout, check=False, text=True)
    if done.returncode != 0:
        raise RuntimeError("the worker could not start torch: " + done.stderr.strip()[-2000:])
    return json.loads(done.stdout)
