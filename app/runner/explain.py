"""Turn a run's Outcome into a Trace document whose `error`, if any, says what happened in words
a person can act on: which limit was hit, what the sandbox refused, where the script was.

The worker's report is written by the process that ran the script, so the script can write it
itself: it is validated against the whole JSON Schema, and what the server knows better (the
script it sent, the sandbox it set up) is written over whatever the report says. Torch-free.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import tempfile

from app.format import InvalidTrace, Trace, diagnostic, error_record, new_document, validate
from app.format.png import figure_problem

from .child import Outcome
from .protocol import TIME_LIMIT_MESSAGE, Job
from .sandbox import ResourceLimits, seccomp

__all__ = ["to_document"]

# where the runs' folders are (child.py makes them with this prefix): paths there are a run's own
RUN_FOLDERS = os.path.join(tempfile.gettempdir(), "autograd-lab-run-")
_ALLOWED = ("The sandbox allows a script to read its own folder and Python's libraries, to write "
            "only in its own folder, and to start no program and open no network connection.")


# the kinds of failure only this side (the supervisor, the web server) names: never the worker's
# (which names SyntaxError, Timeout, TraceTooLarge, DeviceUnavailable and the script's own
# exceptions). In a report they are the script's: its own exception class of that name, or a
# report it wrote itself (schema-valid, it is read), and its words must not read as the server's
# failure, nor count as one in the metrics' outcomes.
SUPERVISOR_KINDS = frozenset({"SandboxFailed", "WorkerFailed", "WorkerCrashed", "ResourceLimit",
                              "MemoryLimit", "ServerBusy", "ServerError", "UploadHostLost",
                              "Stopped"})


SELF_SIGTERM_MESSAGE = (
    "the script's process was sent SIGTERM before its time limit, by the script itself or a "
    "process it started, and stopped at the line shown (run plainly, it would end there, "
    "killed by that signal)")

def _script_named(doc: dict, timed_out: bool) -> None:
    """A report's error of a kind only the server names, by the full name of the script's own
    class of that name (its module's, the script's `__main__`, and its own), as
    `SandboxFailed.__module__` and `__qualname__` say: `__main__.SandboxFailed`. A Timeout
    too, unless the supervisor saw the run reach its time limit: the worker names one only
    after the supervisor's SIGTERM, so any other is the script's own `class Timeout`."""
    error = doc.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    if kind in SUPERVISOR_KINDS or (kind == "Timeout" and not timed_out):
        error["type"] = f"__main__.{kind}"
    if kind == "Timeout" and not timed_out and error.get("message") == TIME_LIMIT_MESSAGE:
        # the worker's words for the time limit, which had not come: the script (or a process
        # it started) sent the SIGTERM, or wrote the words itself
        error["message"] = SELF_SIGTERM_MESSAGE


def to_document(outcome: Outcome, *, job: Job, source: str, limits: ResourceLimits) -> Trace:
    name, device, timeout, script_file = job.name, job.device, job.timeout, job.script
    doc = outcome.document
    problem = outcome.unreadable
    if doc is not None and not outcome.checked:
        try:
            validate(doc)
        except InvalidTrace as exc:
            problem = str(exc)
    if problem is None and doc is not None:
        _script_named(doc, outcome.timed_out)
    if problem is not None:
        # the script can write the worker's report itself: a forged one is not shown
        doc = new_document(name, source, device, None)
        doc["error"] = error_record(
            "WorkerFailed", f"The run's report was not a valid trace ({problem}): the script "
            "may have overwritten it. Nothing of it is shown.")
    elif doc is None:
        doc = new_document(name, source, device, None)
        doc["error"] = _no_document(outcome, timeout, limits, script_file)
        doc["stderr"] = outcome.log
    elif outcome.timed_out and doc.get("error") and doc["error"]["type"] == "Timeout":
        if not doc["error"].get("line"):
            doc["error"]["line"] = _crash_line(outcome.log, script_file)
        doc["error"]["message"] = _timeout_message(timeout, doc["error"].get("line"))
    elif doc.get("error"):
        _explain_exception(doc["error"], limits, source)
    _refuse_bad_figures(doc)
    if outcome.oom_kills:
        doc["error"] = _run_memory_error(outcome.oom_kills, limits, doc.get("error"),
                                         outcome.oom_all_runs)
    if outcome.stopped:
        line = (doc.get("error") or {}).get("line")
        where = f" at line {line}" if line else ""
        doc["error"] = error_record("Stopped", f"The run was stopped on request after "
                                    f"{outcome.elapsed:.1f} s{where}.", line)
    if outcome.log_bytes > len(outcome.log.encode("utf-8", errors="replace")):
        doc["output_dropped"] = outcome.log_bytes  # raw fd output beyond what was kept
    doc["elapsed"] = round(outcome.elapsed, 3)
    doc["script"] = {"name": name, "source": source, "args": list(job.args),
                     "sha256": hashlib.sha256(source.encode("utf-8")).hexdigest()}
    doc["sandbox"] = _sandbox(outcome, limits)
    return doc


def _refuse_bad_figures(doc: dict) -> None:
    """Figures whose PNG is not what it says (png.py) are taken out, and a diagnostic says
    which and why; the others are numbered again in order, as the store serves them."""
    kept = []
    for figure in doc.get("figures") or []:
        problem = figure_problem(figure)
        if problem is None:
            kept.append({**figure, "index": len(kept)})
            continue
        doc.setdefault("diagnostics", []).append(diagnostic(
            "figure_refused", "warning",
            f"Figure {figure['index'] + 1} is not shown: {problem}. A figure made with "
            "matplotlib is always shown; this one was written some other way."))
    if "figures" in doc:
        doc["figures"] = kept


def _sandbox(outcome: Outcome, limits: ResourceLimits) -> dict:
    """The sandbox as the supervisor saw it: what the worker said once confined, before any of
    the script ran (its READY line), and the limits the server set. Not the server's paths."""
    status = dict(outcome.status)
    landlock = status.get("landlock")
    if isinstance(landlock, dict):
        status["landlock"] = {k: v for k, v in landlock.items() if k not in ("read", "write")}
    status["limits"] = limits.to_json()
    return status


def _run_memory_error(kills: int, limits: ResourceLimits, earlier: dict | None,
                      all_runs: bool = False) -> dict:
    """The run's cgroup hit its memory limit, or all runs together hit theirs: whatever else
    the run reported followed from it."""
    line = (earlier or {}).get("line")
    at = f" (the script was at line {line})" if line else ""
    what = "one of its processes" if kills == 1 else f"{kills} of its processes"
    if all_runs:
        record = error_record(
            "MemoryLimit", "The runs on this server together used all the memory runs may have "
            f"here, and the kernel stopped {what}{at} to make room. This run was within its own "
            f"{limits.run_memory_mb} MiB: run it again when the server is less busy, or keep "
            "less in memory at once.", line)
    else:
        record = error_record(
            "MemoryLimit", f"The run as a whole used more than the {limits.run_memory_mb} MiB "
            "of memory it may have (all its processes together, with what they keep in files "
            f"in memory and shared memory), so the kernel stopped {what}{at}. Use smaller "
            "tensors, fewer processes, or keep less in memory at once.", line)
    if earlier:
        record["exception"] = earlier.get("type", "")
    return record


def _timeout_message(timeout: float, line: int | None) -> str:
    where = f" and was stopped at line {line}" if line else " and was stopped"
    return (f"The script ran longer than the {timeout:g} s limit{where}. "
            "Look for an endless loop, a long sleep or too many iterations.")


def _crash_line(log: str, script_file: str) -> int | None:
    """The script's line in a faulthandler dump (the worker enables it): the innermost frame."""
    lines = re.findall(r'File "([^"]+)", line (\d+)', log)
    for path, line in lines:  # faulthandler lists the innermost frame first
        if path.endswith("/" + script_file) or path == script_file:
            return int(line)
    return None


_LAUNCHER_LOST_A_SIGNAL = re.compile(r"^unshare: (sigprocmask unblock|signal handler reset) "
                                     r"failed", re.M)


def _no_document(o: Outcome, timeout: float, limits: ResourceLimits, script_file: str) -> dict:
    if not o.ready:
        return _never_ready(o)
    if o.too_large:
        return error_record(
            "TraceTooLarge", f"The trace is larger than the {limits.report_mb} MiB a run may "
            "return. Make the model or the number of backward passes smaller.")
    if o.timed_out:
        # killed after the grace period with no report: the stack the worker wrote when the
        # limit came still says where it was (worker.py registers faulthandler for SIGTERM)
        line = _crash_line(o.log, script_file)
        return error_record("Timeout", _timeout_message(timeout, line), line)
    sig = o.signal
    line = _crash_line(o.log, script_file)
    at = f" at line {line}" if line else ""
    if sig in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT"):
        return error_record(
            "WorkerCrashed", f"The script crashed in native code ({sig}){at}: something it "
            "called (ctypes, a C extension) touched memory it must not. The server is fine; "
            "fix that call.", line, log=o.log)
    if sig in ("SIGXCPU", "SIGKILL"):
        return error_record(
            "ResourceLimit", f"The script's process was killed ({sig}){at}: it used more CPU "
            f"time than its {timeout:g} s limit allows on all of this machine's cores, or "
            f"more memory than the {limits.memory_mb} MiB a run may have.", line, log=o.log)
    if sig:
        return error_record("WorkerCrashed", f"The script's process was killed by {sig}{at} "
                            "before it could report.", line, log=o.log)
    if o.returncode == 1 and _LAUNCHER_LOST_A_SIGNAL.search(o.launcher_log):
        # util-linux's unshare, whose child (the worker) a signal ended, passes it on by
        # raising it on itself; where that fails it exits 1 with this line: the worker was
        # killed, not the script's own doing (seen from batch jobs near the time limit).
        # Read on unshare's own stderr (child.py), never the worker's: a script writes that
        # line and exits 1 as easily
        if o.elapsed >= timeout:
            return error_record("Timeout", _timeout_message(timeout, line), line, log=o.log)
        return error_record(
            "ResourceLimit", f"The script's process was killed{at} by a signal its launcher "
            f"could not pass on: most likely it used more CPU time than its {timeout:g} s "
            f"limit allows on all of this machine's cores, or more memory than the "
            f"{limits.memory_mb} MiB a run may have.", line, log=o.log)
    # no "sandbox launcher failed" case here: the launcher's failures come before READY
    # (_never_ready); after it, that line and exit status 70 are the script's to write
    # (os.write(2, ...); os._exit(70)), and must not put its words in the server's mouth
    return error_record("WorkerFailed", f"The script's process ended (exit status "
                        f"{o.returncode}) without writing a trace.", log=o.log)


def _never_ready(o: Outcome) -> dict:
    """The worker ended (or was refused) before its READY line, every one tried: no line of
    the script ran, so this is the machine's failure, and says so, with the last one's log."""
    lines = [line for line in o.log.strip().splitlines() if line.strip()]
    if o.slow_start:
        return error_record(
            "SandboxFailed", "The sandbox could not start this run: its worker was still "
            "starting (importing torch) when the time to start ran out, so the server is "
            "overloaded. None of the script ran. Try again in a while, and tell whoever runs "
            "the server.", log=o.log)
    if lines:
        why = lines[-1][:300]
    elif o.signal:
        why = f"it was killed by {o.signal}"
    else:
        why = f"exit status {o.returncode}" if o.returncode is not None else "no answer"
    tried = "the worker" if o.starts == 1 else f"each of the {o.starts} workers tried"
    return error_record(
        "SandboxFailed", f"The sandbox could not start this run: {tried} ended before the "
        f"script was handed to it ({why}). None of the script ran: this is the server's "
        "failure, not the script's. Try again in a while, and tell whoever runs the server "
        "(its /healthz counts these failures).", log=o.log)


def _outside_the_run(message: str) -> bool:
    """Does the message name an absolute path outside the run's folder? The run's own root
    holds little else (own_root.py): a missing file there is most likely the machine's."""
    found = re.search(r"'(/[^']*)'", message)
    return bool(found) and not found.group(1).startswith(RUN_FOLDERS)


_STARTS_PROGRAMS = ("subprocess", "popen", "os.system", "os.exec", "os.spawn", "os.posix_spawn")


def _line_text(source: str, line: int | None) -> str:
    lines = source.splitlines()
    return lines[line - 1] if isinstance(line, int) and 0 < line <= len(lines) else ""


def _explain_exception(err: dict, limits: ResourceLimits, source: str = "") -> None:
    """Add the reason to an exception that a sandbox layer or a limit caused."""
    kind, message = err.get("type", ""), err.get("message", "")
    refused = seccomp.refusal_of(_line_text(source, err.get("line")))
    if kind == "MemoryError" or "can't allocate memory" in message or \
            "Cannot allocate memory" in message or message.strip() == "std::bad_alloc":
        err["exception"] = kind
        err["type"] = "MemoryLimit"
        detail = "" if message in ("", kind) else f": {message.splitlines()[0][:300]}"
        err["message"] = (f"The script asked for more memory than the {limits.memory_mb} MiB a "
                          f"run may use ({kind}{detail}). Use smaller tensors or fewer of them.")
    elif f"[Errno {errno.EMFILE}]" in message:
        err["message"] = (f"{message} - a run may have at most {limits.open_files} files open "
                          "at once; close files when done (use `with open(...)`).")
    elif f"[Errno {errno.EFBIG}]" in message:
        err["message"] = (f"{message} - a run may write files of at most "
                          f"{limits.file_size_mb} MiB.")
    elif f"[Errno {errno.ENOSPC}]" in message:
        err["message"] = (f"{message} - a run's folder holds at most {limits.folder_mb} MiB "
                          f"and {limits.folder_files} files.")
    elif f"[Errno {errno.EAGAIN}]" in message and kind == "BlockingIOError":
        err["message"] = (f"{message} - a run may have at most {limits.processes} processes "
                          "and threads; the script started too many.")
    elif kind == "ProcessLookupError":
        err["message"] = (f"{message} - a run sees only its own processes; the server and "
                          "everything else on the machine are out of its reach.")
    elif refused and (f"[Errno {errno.EPERM}]" in message or
                      f"[Errno {errno.EAFNOSUPPORT}]" in message):  # what the filter returns
        err["message"] = (f"{message} - refused by the sandbox: a script may not use {refused}. "
                          f"{_ALLOWED}")
    elif kind in ("FileNotFoundError", "PermissionError") and \
            any(c in _line_text(source, err.get("line")).lower() for c in _STARTS_PROGRAMS):
        err["message"] = (f"{message} - refused by the sandbox: a run starts no program (its "
                          f"root holds none, and it may not run one). {_ALLOWED}")
    elif kind == "FileNotFoundError" and _outside_the_run(message):
        err["message"] = (f"{message} - outside its own folder (the current directory) a run "
                          "sees only Python's libraries and the system's: nothing else of this "
                          f"machine is there. {_ALLOWED}")
    elif f"[Errno {errno.EAFNOSUPPORT}]" in message:
        err["message"] = (f"{message} - refused by the sandbox: a script may open no socket but "
                          f"AF_UNIX ones between its own processes. {_ALLOWED}")
    elif kind == "PermissionError" or f"[Errno {errno.EACCES}]" in message or \
            f"[Errno {errno.EPERM}]" in message or f"[Errno {errno.ENETUNREACH}]" in message:
        err["message"] = f"{message} - refused by the sandbox. {_ALLOWED}"
