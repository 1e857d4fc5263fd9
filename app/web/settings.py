"""Every setting of the web app, in one place, read from the environment and checked at start.

| setting          | environment variable          | default   | meaning                       |
|------------------|-------------------------------|-----------|-------------------------------|
| host             | AUTOGRAD_LAB_HOST             | 127.0.0.1 | address the server binds      |
| port             | AUTOGRAD_LAB_PORT             | 8000      | port the server binds         |
| trace_timeout    | AUTOGRAD_LAB_TRACE_TIMEOUT    | 60        | wall-clock limit of a lesson  |
| upload_timeout   | AUTOGRAD_LAB_UPLOAD_TIMEOUT   | 20        | ... of uploaded code, s (7)   |
| per_client_running | AUTOGRAD_LAB_PER_CLIENT_RUNNING | 1     | runs one person may run (8)   |
| per_client_queued | AUTOGRAD_LAB_PER_CLIENT_QUEUED | 2       | ... and have waiting (8)      |
| lesson_workers   | AUTOGRAD_LAB_LESSON_WORKERS   | 1         | workers kept for lessons (9)  |
| warm_lessons     | AUTOGRAD_LAB_WARM_LESSONS     | true      | trace every lesson at start   |
| max_workers      | AUTOGRAD_LAB_MAX_WORKERS      | cores     | drawings at once; see (11)    |
| upload_workers   | AUTOGRAD_LAB_UPLOAD_WORKERS   | auto (11) | uploads running at once       |
| cache_size       | AUTOGRAD_LAB_CACHE_SIZE       | 64        | traces kept in memory         |
| queue_size       | AUTOGRAD_LAB_QUEUE_SIZE       | 32        | runs that may wait (then 503) |
| token            | AUTOGRAD_LAB_TOKEN            | (none)    | uploaded code needs it (1)    |
| max_upload_bytes | AUTOGRAD_LAB_MAX_UPLOAD_BYTES | 65536     | largest script (then 413)     |
| store_path       | AUTOGRAD_LAB_STORE_PATH       | (2)       | where submitted runs are kept |
| store_max_runs   | AUTOGRAD_LAB_STORE_MAX_RUNS   | 500       | runs kept; oldest go first    |
| store_max_bytes  | AUTOGRAD_LAB_STORE_MAX_BYTES  | 268435456 | gzip bytes kept; oldest first |
| store_max_run_bytes | AUTOGRAD_LAB_STORE_MAX_RUN_BYTES | 16777216 | gzip bytes of one run (5) |
| pool_size        | AUTOGRAD_LAB_POOL_SIZE        | cores     | ready sandboxed workers (3)   |
| selftest         | AUTOGRAD_LAB_SELFTEST         | true      | sandbox self-test at start    |
| run_memory_mb    | AUTOGRAD_LAB_RUN_MEMORY_MB    | 3072      | memory of a whole run (6)     |
| allowed_hosts    | AUTOGRAD_LAB_ALLOWED_HOSTS    | (none)    | other names it answers to (4) |
| max_classes      | AUTOGRAD_LAB_MAX_CLASSES      | 50        | class sessions open at once   |
| forkserver       | AUTOGRAD_LAB_FORKSERVER       | true      | fork workers from a warm one (10) |

(1) When set, every upload needs it, on loopback too; bound to another address, uploads are
    refused without one (auth.py).
(2) ~/.cache/autograd-lab/runs.sqlite3
(3) Pre-started workers kept ready; 0 starts a fresh worker for each run.
(4) Comma-separated host names (the Host header, port aside) besides localhost, 127.0.0.1, ::1
    and the bind address; any other is refused (guards.py). Bound to 0.0.0.0 or :: with none
    given, every name is accepted (uploads there need the token anyway).
(5) A larger run is stored as its script and an error saying so (store.py).
(6) All of a run's processes together, files in memory and shared memory included (a cgroup,
    where the machine has one; each process also has its own address-space limit).
(7) A class's default: the built-in lessons take under 2 s each in a warm worker, and a
    tutorial-style script (a few hundred steps of a small model) a few seconds; 20 s leaves room
    on a busy 2-core machine and bounds what a stuck script costs the room.
(8) Per person: the session cookie the pages set, else the client's address. Past both, 429.
(9) Lessons (built-in scenarios) have workers, a queue and a cache of their own: they never
    wait behind uploaded code, and uploads run at a lower CPU priority.
(10) A fork server imports torch once, and each run's worker is forked from it and then
    confined (app/runner/forkserver.py): a worker starts in ~0.1 s instead of ~3 s of CPU.
    Needs root; elsewhere, or switched off, every run starts a fresh worker.
(11) 0 (auto): 3 x max_workers with a fork server (a forked run costs little to start, so a
    few endless scripts cannot hold every worker while the room waits), max_workers without.
With the self-test off, /healthz and the page say so and uploads from other hosts are refused.
Booleans are written 1/true/yes/on or 0/false/no/off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

__all__ = ["Settings", "SettingsError"]

_ENV_PREFIX = "AUTOGRAD_LAB_"


class SettingsError(ValueError):
    """A setting has a value the app cannot use; the message names it."""


def _boolean(raw: str) -> bool:
    # bool("0") is True: spell the words out rather than trust the constructor
    word = raw.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    trace_timeout: float = 60.0
    upload_timeout: float = 20.0
    per_client_running: int = 1
    per_client_queued: int = 2
    lesson_workers: int = 1
    warm_lessons: bool = True
    max_workers: int = max(1, os.cpu_count() or 1)
    upload_workers: int = 0
    cache_size: int = 64
    queue_size: int = 32
    token: str = ""
    max_upload_bytes: int = 64 * 1024
    store_path: str = str(Path.home() / ".cache" / "autograd-lab" / "runs.sqlite3")
    store_max_runs: int = 500
    store_max_bytes: int = 256 * 1024 * 1024
    store_max_run_bytes: int = 16 * 1024 * 1024
    pool_size: int = max(1, os.cpu_count() or 1)
    selftest: bool = True
    allowed_hosts: str = ""
    run_memory_mb: int = 3072
    max_classes: int = 50
    forkserver: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"port must be between 1 and 65535, not {self.port}")
        if self.trace_timeout <= 0 or self.upload_timeout <= 0:
            raise SettingsError(f"trace_timeout and upload_timeout must be positive, not "
                                f"{self.trace_timeout} and {self.upload_timeout}")
        if self.per_client_running < 1 or self.per_client_queued < 0:
            raise SettingsError("per_client_running must be at least 1 and per_client_queued "
                                "0 or more")
        if self.lesson_workers < 1:
            raise SettingsError(f"lesson_workers must be at least 1, not {self.lesson_workers}")
        if self.upload_workers < 0:
            raise SettingsError(f"upload_workers must be 0 (auto) or more, not "
                                f"{self.upload_workers}")
        if self.max_workers < 1:
            raise SettingsError(f"max_workers must be at least 1, not {self.max_workers}")
        if self.cache_size < 1:
            raise SettingsError(f"cache_size must be at least 1, not {self.cache_size}")
        if self.queue_size < 0:
            raise SettingsError(f"queue_size must be 0 or more, not {self.queue_size}")
        if self.max_upload_bytes < 1024:
            raise SettingsError(f"max_upload_bytes must be at least 1024, not "
                                f"{self.max_upload_bytes}")
        if self.store_max_runs < 1 or self.store_max_bytes < 1 or self.store_max_run_bytes < 1:
            raise SettingsError("store_max_runs, store_max_bytes and store_max_run_bytes must "
                                "be positive")
        if self.run_memory_mb < 512:
            raise SettingsError(f"run_memory_mb must be at least 512 (a worker with torch "
                                f"loaded takes about 300), not {self.run_memory_mb}")
        if self.max_classes < 1:
            raise SettingsError(f"max_classes must be at least 1, not {self.max_classes}")
        if self.pool_size < 0:
            raise SettingsError(f"pool_size must be 0 or more, not {self.pool_size}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> Settings:
        environ = os.environ if environ is None else environ
        values: dict = {}
        for f in fields(cls):
            raw = environ.get(_ENV_PREFIX + f.name.upper())
            if raw is None:
                continue
            kind = type(f.default)
            try:
                values[f.name] = _boolean(raw) if kind is bool else kind(raw)
            except ValueError as exc:
                raise SettingsError(f"{_ENV_PREFIX}{f.name.upper()}={raw!r} is not a valid "
                                    f"{kind.__name__}") from exc
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
