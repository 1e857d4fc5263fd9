"""What the server and a worker process say to each other: one definition for the supervisor
(`child.py`), the tracing worker (`worker.py`) and the self-test's probe (`selftest_worker.py`).

    supervisor                                  worker (python -m app.runner.worker --serve DIR)
    ----------                                  ------------------------------------------------
    starts it with `worker_env(DIR)` only       imports torch, confines itself (Landlock)
                                           <--  READY {"pid": ..., "landlock": {...}}\\n
    writes the script into DIR, then
    the job as one JSON line on stdin      -->  reads at most MAX_JOB_LINE bytes of it
                                                sets the job's rlimits, runs, writes
                                                DIR/trace.json.partial, renames it DIR/trace.json
    reads DIR/trace.json (capped, no links)     exits

Torch-free: the web process imports it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = [
    "READY", "MAX_JOB_LINE", "TIME_LIMIT_MESSAGE", "RESULT_FILE", "PARTIAL_FILE", "THREAD_VARS",
    "ALLOWED_ENV", "Job",
    "LaunchPlan", "PlanError",
    "app_root", "ready_line", "parse_ready", "worker_env", "write_result",
]

READY = "AUTOGRAD-LAB-WORKER-READY"
MAX_JOB_LINE = 64 * 1024
RESULT_FILE = "trace.json"
PARTIAL_FILE = RESULT_FILE + ".partial"  # written first, then renamed: never half a report
# one thread each: runs are small, and a busy server runs several side by side
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def app_root() -> Path:
    """The folder that holds the `app` package (what the worker's PYTHONPATH names)."""
    import app

    return Path(app.__file__).resolve().parent.parent


def worker_env(run_dir: Path) -> dict[str, str]:
    """The whole environment of the worker: nothing of the server's, bar the GPU choice."""
    env = {
        "LANG": "C.UTF-8",
        "HOME": str(run_dir),
        "TMPDIR": str(run_dir),
        "PYTHONPATH": str(app_root()),
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "MPLBACKEND": "Agg",  # figures are drawn to PNG for the page (app/trace/figures.py)
        "MPLCONFIGDIR": str(run_dir),
        **{var: "1" for var in THREAD_VARS},
    }
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


# what the self-test accepts in a worker's environment (LC_CTYPE: Python sets it for C.UTF-8)
ALLOWED_ENV = frozenset(worker_env(Path("/")) | {"CUDA_VISIBLE_DEVICES": "", "LC_CTYPE": ""})


@dataclass(frozen=True)
class Job:
    """The one job a worker runs: the script's file name in its folder and how to run it."""
    script: str = "script.py"
    name: str = "script.py"
    device: str = "cpu"
    args: list[str] = field(default_factory=list)
    max_events: int = 10
    timeout: float = 60.0
    # torch's threads for the script: 1 while runs share the machine, its cores when this run
    # has it alone (a plain run would use them: traced runs took twice as long without)
    threads: int = 1
    # watch every operation to the end, not only through the kept passes (slower; recorder.py)
    watch_all: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # the self-test probe's instructions

    def to_line(self) -> bytes:
        data = asdict(self)
        extra = data.pop("extra")
        return json.dumps({**extra, **data}).encode("utf-8") + b"\n"

    @classmethod
    def from_line(cls, line: bytes) -> Job:
        data = json.loads(line)
        own = {k: data.pop(k) for k in ("script", "name", "device", "args", "max_events",
                                        "timeout", "threads", "watch_all") if k in data}
        return cls(**own, extra=data)


# the worker's words when SIGTERM (the run's time limit) stops the script: explain.py names
# them the script's own where the supervisor saw no time limit (the script sent the signal)
TIME_LIMIT_MESSAGE = ("the script ran past its time limit and was stopped; the line shown is "
                      "where it was (look for an endless loop, a long sleep or too many "
                      "iterations)")

class PlanError(ValueError):
    """A launch plan that is not one: a key missing, unknown or of the wrong type (named)."""


@dataclass(frozen=True)
class LaunchPlan:
    """How a run's worker is started and confined, the same for an exec'd worker (the
    launcher, sandbox/enter.py, gets it as JSON on its command line) and a forked one (the fork
    server gets it over its socket). The supervisor (child.py) makes it."""
    run_dir: str
    env: dict[str, str]            # the worker's whole environment (worker_env)
    limits: dict[str, Any]         # ResourceLimits.to_json()
    uid: int | None = None         # the run's own uid (a root server), else None
    gid: int | None = None
    expose: list[str] = field(default_factory=list)  # paths the run's uid must reach
    private_folder: bool = False   # the run folder as a tmpfs of its own (a mount namespace)
    private_shm: bool = False      # a /dev/shm of its own
    user_namespace: bool = False   # inside a user namespace of the run's own (not root)
    nice: int = 0                  # added to the CPU niceness: only ever lower priority
    server_mnt_ns: str = ""        # the server's mount namespace: mounts refused inside it
    cgroups: list[str] = field(default_factory=list)  # cgroup.procs files to join first
    # a root of the run's own: every top-level folder but these paths' (and the system's
    # libraries, /dev, /proc, /etc) is covered (sandbox/own_root.py); empty: off
    own_root: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> LaunchPlan:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise PlanError(f"the launch plan is not JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> LaunchPlan:
        """Checked key by key: a plan is read by the launcher before any layer is in place,
        so a wrong one must stop it with a sentence rather than half-confine a run."""
        if not isinstance(data, dict):
            raise PlanError(f"the launch plan must be a JSON object, not {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise PlanError(f"the launch plan has unknown keys: {', '.join(unknown)}")
        for name in ("run_dir", "env", "limits"):
            if name not in data:
                raise PlanError(f"the launch plan lacks {name!r}")
        for name, value in data.items():
            if not _PLAN_TYPES[name](value):
                raise PlanError(f"the launch plan's {name!r} has the wrong type: {value!r}")
        return cls(**data)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_PLAN_TYPES = {
    "run_dir": lambda v: isinstance(v, str) and bool(v),
    "env": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()),
    "limits": lambda v: isinstance(v, dict),
    "uid": lambda v: v is None or _is_int(v),
    "gid": lambda v: v is None or _is_int(v),
    "expose": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "private_folder": lambda v: isinstance(v, bool),
    "private_shm": lambda v: isinstance(v, bool),
    "user_namespace": lambda v: isinstance(v, bool),
    "nice": _is_int,
    "server_mnt_ns": lambda v: isinstance(v, str),
    "cgroups": lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v),
    "own_root": lambda v: isinstance(v, list) and all(isinstance(p, str) and p.startswith("/")
                                                      for p in v),
}


def ready_line(status: dict) -> str:
    """The line a worker prints once it is confined and waits for its job."""
    return f"{READY} {json.dumps(status)}"


def parse_ready(line: bytes) -> dict | None:
    """The worker's status from a READY line; None for any other line."""
    if not line.startswith(READY.encode()):
        return None
    try:
        status = json.loads(line[len(READY):])
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def write_result(folder: Path, write) -> None:
    """Write the report through `write(path)` under the partial name, then rename it: the
    supervisor never reads half a file."""
    partial = folder / PARTIAL_FILE
    write(partial)
    os.replace(partial, folder / RESULT_FILE)
