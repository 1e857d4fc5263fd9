"""Start the worker (`python -m app.trace.worker`) for one script and collect its document.

The caller never imports the script or torch: everything comes back as JSON through a file in
the run's own temporary folder. Whatever happens to the worker (an exception, a crash, a run
past the wall-clock limit), the caller gets a document whose `error` says what to do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import app
from app.trace.document import error_record, new_document

DEFAULT_TIMEOUT = 60.0
GRACE = 3.0  # seconds between SIGTERM (the worker reports where it was) and SIGKILL
MAX_DOCUMENT = 64 * 1024 * 1024
MAX_LOG = 16 * 1024

__all__ = ["run_trace", "probe_devices", "DEFAULT_TIMEOUT"]


def _child_env() -> dict[str, str]:
    """A small, predictable environment: the script sees no secrets of the server's."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        # one thread: runs are small, and a busy server runs several side by side
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # the worker imports the very `app` package this process runs
        "PYTHONPATH": str(Path(app.__file__).resolve().parent.parent),
    }
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def run_trace(script: Path | None = None, *, source: str | None = None, name: str | None = None,
              args: list[str] | tuple[str, ...] = (), device: str = "cpu",
              timeout: float = DEFAULT_TIMEOUT, max_events: int = 10) -> dict:
    """Trace a script given as a path or as source text; always returns a Trace document."""
    if (script is None) == (source is None):
        raise ValueError("give either a script path or its source")
    run_dir = Path(tempfile.mkdtemp(prefix="autograd-lab-run-"))
    try:
        if script is not None:
            script = Path(script)
            source = script.read_text(encoding="utf-8", errors="replace")
            name = name or script.name
        name = name or "script.py"
        # the worker runs a copy in the run folder: what it writes beside itself stays there
        script_path = run_dir / Path(name).name
        script_path.write_text(source, encoding="utf-8")
        out = run_dir / "trace.json"
        cmd = [sys.executable, "-m", "app.trace.worker", "--script", str(script_path),
               "--out", str(out), "--device", device, "--name", name,
               "--max-events", str(max_events), "--", *args]
        return _supervise(cmd, run_dir, out, name, source, device, timeout)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _supervise(cmd, run_dir: Path, out: Path, name: str, source: str, device: str,
               timeout: float) -> dict:
    log_path = run_dir / "worker.log"
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=run_dir, env=_child_env(), stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                pass
        finally:
            # the worker's whole process group goes, whatever the script started
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    elapsed = time.monotonic() - started
    doc = _read_document(out)
    if doc is not None:
        if timed_out and doc.get("error") and doc["error"]["type"] == "Timeout":
            doc["error"]["message"] = (f"The script ran longer than the {timeout:g} s limit and "
                                       f"was stopped at line {doc['error']['line']}. "
                                       "Look for an endless loop, a long sleep or too many "
                                       "iterations.") if doc["error"]["line"] else \
                f"The script ran longer than the {timeout:g} s limit and was stopped."
        doc["elapsed"] = round(elapsed, 3)
        return doc
    doc = new_document(name, source, device, None)
    doc["elapsed"] = round(elapsed, 3)
    log_tail = _tail(log_path)
    if timed_out:
        doc["error"] = error_record(
            "Timeout", f"The script ran longer than the {timeout:g} s limit and was stopped. "
            "Look for an endless loop, a long sleep or too many iterations.")
    elif proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        doc["error"] = error_record(
            "WorkerCrashed", f"The script's process was killed by {sig} before it could report "
            "(a crash in native code, or a resource limit).", log=log_tail)
    else:
        doc["error"] = error_record(
            "WorkerFailed", f"The script's process ended (exit status {proc.returncode}) without "
            "writing a trace.", log=log_tail)
    doc["stderr"] = log_tail
    return doc


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_document(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_DOCUMENT:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-MAX_LOG:].decode("utf-8", errors="replace")


def probe_devices(timeout: float = 60.0) -> dict:
    """{"torch": version, "devices": [...]} as a worker process sees them."""
    done = subprocess.run([sys.executable, "-m", "app.trace.probe"], capture_output=True,
                          env=_child_env(), timeout=timeout, check=False, text=True)
    if done.returncode != 0:
        raise RuntimeError("the worker could not start torch: " + done.stderr.strip()[-2000:])
    return json.loads(done.stdout)
