"""Traces for the web app, computed by the runner in two lanes, and the scenarios' cache (their
drawings are drawings.py's).

- Scenarios (the built-in scenarios) have a lane of their own: workers, a pool and a queue that
  uploads never take, their runs at normal CPU priority, and a cache, warmed at start-up with
  every variant at default options. A teacher's scenario opens at once whatever the room's code
  is doing.
- Uploads have the upload lane: its own workers and pool, a shorter wall-clock limit, a lower
  CPU priority. The in-process queue (in_process_queue.py) runs them in it, behind each person's
  share; the upload service (uploads.py) owns their life.

The web process is stateless apart from the caches (and the run store), so several can run side
by side. Two requests for the same scenario wait for one run instead of starting two.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.catalog import Scenario, scenario_args
from app.format import Trace
from app.lru import LRU
from app.runner import (
    ForkServer,
    Policy,
    Pool,
    ResourceLimits,
    StartFailures,
    bound_all_runs,
    fork_server_supported,
    machine_memory,
    plain_threads,
    probe_devices,
    trace_in_sandbox,
)
from app.web.metrics import RunMeter, outcome_of
from app.web.settings import Settings

from .gate import Gate

__all__ = ["TraceService", "DeviceError", "DevicesUnknown"]

log = logging.getLogger("autograd_lab.web")

# errors of the machine rather than of the script: worth another try
_PASSING = {"Timeout", "WorkerCrashed", "WorkerFailed", "SandboxFailed", "MemoryLimit",
            "TraceTooLarge", "Stopped"}
UPLOAD_NICE = 10  # uploads yield the CPU to scenarios
UPLOADS_PER_CORE_FORKED = 3


def _torch_version() -> str:
    """The installed torch's version, read from its metadata: the web process never imports it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"



# seconds a request waits for the device list, then is told "still checking" (503): a worker
# starts torch to look, a few seconds even on a busy machine
DEVICES_WAIT = 20.0
DEVICES_RETRY_S = 60.0  # after a failed look, the next is not before this


class DevicesUnknown(RuntimeError):
    """The device list is not known (yet): still being asked of a worker, or that failed."""

    def __init__(self, message: str, still_checking: bool = False) -> None:
        super().__init__(message)
        self.still_checking = still_checking


class DeviceError(ValueError):
    """The requested device is not on this machine (422, http/error_handler.py)."""


@dataclass
class Lane:
    """Workers for one kind of run: how many at once, a pool of ready ones, their sandbox."""
    gate: Gate
    policy: Policy
    pool_size: int
    timeout: float
    pool: Pool | None = None
    fork_server: ForkServer | None = None
    # is this run alone on the machine (nothing else running or waiting, in any lane)? Then
    # it gets torch's threads as a plain run would; under load, one each, as before
    alone: Callable[[], bool] = lambda: False
    # workers that ended before READY, counted for the metrics and /healthz (the service's)
    start_failures: StartFailures | None = None

    def start(self) -> None:
        if self.pool_size and self.pool is None:
            self.pool = Pool(self.pool_size, policy=self.policy, fork_server=self.fork_server,
                             **self._counted()).start()

    def _counted(self) -> dict:
        return {} if self.start_failures is None else {"start_failures": self.start_failures}

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None

    def run(self, source: str, name: str, args: list[str], device: str,
            started: Callable | None = None, cancel: threading.Event | None = None) -> Trace:
        doc = trace_in_sandbox(source=source, name=name, args=args, device=device,
                               timeout=self.timeout, pool=self.pool,
                               policy=None if self.pool else self.policy, started=started,
                               cancel=cancel,
                               fork_server=self.fork_server,
                               threads=plain_threads(device) if self.alone() else 1,
                               **self._counted())
        if doc.get("error") and doc["error"]["type"] == "DeviceUnavailable":
            raise DeviceError(doc["error"]["message"])
        return doc


class TraceService:
    def __init__(self, settings: Settings, scenario_meter: RunMeter | None = None) -> None:
        self.settings = settings
        # each scenario run that ended, for the metrics (a cache hit is no run)
        self.scenario_meter = scenario_meter or RunMeter("scenario")
        self._cache: LRU[dict] = LRU(settings.cache_size)
        # the shared mode's store (store/postgres.py: kept_scenario_trace, keep_scenario_trace): a
        # scenario traced once for every web process; None on one machine
        self.shared_scenarios = None
        self._lock = threading.Lock()  # guards _key_locks
        self._key_locks: dict[tuple, threading.Lock] = {}
        limits = ResourceLimits(run_memory_mb=settings.run_memory_mb)
        # one fork server for every lane: workers start in a tenth of a second (fork_server.py)
        self.fork_server: ForkServer | None = None
        self.no_fork_server = "turned off (AUTOGRAD_LAB_FORKSERVER=0)"
        if settings.forkserver:
            supported, why = fork_server_supported()
            if supported:
                self.fork_server = ForkServer()
            else:
                self.no_fork_server = why
                log.warning("no fork server: %s", why)
        # one ready worker more than may run at once: the warm-up below uses only that spare,
        # so a teacher's request finds a worker with torch loaded
        self.scenarios = Lane(Gate(settings.scenario_workers, settings.queue_size),
                            Policy(limits=limits),
                            settings.scenario_workers + 1 if settings.pool_size else 0,
                            settings.trace_timeout)
        self.uploads = Lane(Gate(self.upload_workers(), settings.queue_size),
                            Policy(limits=limits, nice=UPLOAD_NICE), settings.pool_size,
                            settings.upload_timeout)
        self.scenarios.fork_server = self.uploads.fork_server = self.fork_server
        self.scenarios.alone = self.uploads.alone = self._one_run_on_the_machine
        # this service's workers that ended before READY (the machine's failures): both lanes
        self.start_failures = StartFailures()
        self.scenarios.start_failures = self.uploads.start_failures = self.start_failures
        self._probe: dict | None = None
        # the device list, asked of a worker once per process, in a thread of its own: every
        # request meanwhile waits a little for it, then is told it is still being checked
        self._probe_lock = threading.Lock()
        self._probe_done = threading.Event()
        self._probe_failed: tuple[float, str] | None = None  # (when, why)
        self._probing = False
        self.torch_version = _torch_version()
        self.warmed = threading.Event()
        self.started_at = time.monotonic()
        self.warmed_in: float | None = None  # seconds from start until every scenario was traced
        self.warm_count = self.warm_total = 0
        self.all_runs_memory = (False, "not bounded yet: the server is starting")

    def _one_run_on_the_machine(self) -> bool:
        """Asked by a lane as its run starts (already counted as running there)."""
        (scenarios, scenarios_waiting), (uploads, uploads_waiting) = (
            self.scenarios.gate.load(), self.uploads.gate.load())
        return scenarios + uploads <= 1 and not scenarios_waiting and not uploads_waiting

    def upload_workers(self, forked: bool | None = None) -> int:
        """Uploads that may run at once. Forked workers cost little to start and a small run
        little CPU, so with a fork server three per core: a few endless scripts then cannot hold
        every worker while the rest of the room waits (bench/classroom.py). Exec'd workers each
        spend seconds of CPU starting torch: one per core."""
        if self.settings.upload_workers:
            return self.settings.upload_workers
        if forked is None:
            forked = self.fork_server is not None
        return self.settings.max_drawings * (UPLOADS_PER_CORE_FORKED if forked else 1)

    def start(self, catalog: Callable[[], dict[str, Scenario]] | None = None, *,
              scenarios: bool = True, uploads: bool = True) -> None:
        """Start the pools of ready workers (pool_size 0: each run starts a fresh worker) and,
        with `catalog`, trace every scenario in the background. A lane this process does not
        run keeps no pool: a web process of the shared mode runs no uploads (its workers do),
        and a worker process no scenarios."""
        self.started_at = time.monotonic()
        if self.fork_server is not None:
            # first: the pools and the warm-up fork their workers from it once it is ready
            # (or exec them, once it is known to have failed), never both at once
            self.fork_server.start()
            threading.Thread(target=self._size_after_fork_server, daemon=True,
                             name="autograd-lab-fork-server-settle").start()
        self.all_runs_memory = bound_all_runs(self.all_runs_memory_bytes())
        if not self.all_runs_memory[0]:
            log.warning("%s", self.all_runs_memory[1])
        if scenarios:
            self.scenarios.start()
        if uploads:
            self.uploads.start()
        if catalog is not None and self.settings.warm_scenarios:
            threading.Thread(target=self._warm, args=(catalog,), daemon=True,
                             name="autograd-lab-warm-scenarios").start()
        else:
            self._warm_done()

    def all_runs_memory_bytes(self) -> int:
        """The bound on all runs' memory together: the setting, or three quarters of what the
        server's processes may use (never less than one run's own limit)."""
        if self.settings.all_runs_memory_mb:
            return self.settings.all_runs_memory_mb << 20
        return max(machine_memory() * 3 // 4, self.settings.run_memory_mb << 20)

    def _size_after_fork_server(self) -> None:
        """A fork server that failed, at start or later, leaves exec'd workers, each seconds
        of CPU to start: the upload lane is sized for those."""
        if self.fork_server.settle():
            self.fork_server.ended.wait()  # it may still die (killed, out of memory) while serving
        if self.fork_server.failed == "stopped":
            return  # the server is stopping: nothing to size
        workers = self.upload_workers(forked=False)
        log.warning("no fork server (%s): %d uploads at once", self.fork_server.failed, workers)
        self.uploads.gate.resize(workers)

    def _warm_done(self) -> None:
        self.warmed_in = round(time.monotonic() - self.started_at, 2)
        self.warmed.set()

    def workers(self) -> dict:
        """For /healthz: how runs' workers start, how many uploads go at once, and the workers
        that ended before READY (`start_failures`: a pool's, a run's retried, a run's given
        up as SandboxFailed; the last one's stage, age and last log line)."""
        forked = self.fork_server is not None and self.fork_server.usable()
        if self.fork_server is not None:
            detail = self.fork_server.describe()
        else:
            detail = f"runs start fresh workers: no fork server ({self.no_fork_server})"
        bounded, memory = self.all_runs_memory
        return {"forked": forked, "detail": detail, "uploads_at_once": self.uploads.gate.workers,
                "scenarios_at_once": self.scenarios.gate.workers,
                "all_runs_memory": {"bounded": bounded, "detail": memory},
                "start_failures": self.start_failures.report()}

    def warmth(self) -> dict:
        """For /healthz: whether every scenario is traced, and how long that took from start."""
        return {"warm": self.warmed.is_set(), "warmed_in_s": self.warmed_in,
                "traced": self.warm_count, "of": self.warm_total}

    def stop(self) -> None:
        self.scenarios.stop()
        self.uploads.stop()
        if self.fork_server is not None:
            self.fork_server.stop()

    def _warm(self, catalog: Callable[[], dict[str, Scenario]]) -> None:
        """Every scenario's every variant at its default options, on the CPU, into the cache."""
        try:
            todo = []
            for scenario in catalog().values():
                defaults = {k: str(spec["default"]) for k, spec in scenario.options.items()
                            if "default" in spec}
                todo += [(scenario, variant, defaults) for variant in scenario.variants or [None]]
            self.warm_total = len(todo)
            for scenario, variant, defaults in todo:
                self._wait_until_idle()
                self.scenario_trace(scenario, variant, defaults, "cpu")
                self.warm_count += 1
        except Exception:  # noqa: BLE001 - a scenario that cannot be warmed is traced when asked
            log.exception("warming the scenarios' traces failed")
        finally:
            self._warm_done()

    def _wait_until_idle(self, patience: float = 120.0) -> None:
        """The warm-up gives way: it traces only while no scenario runs or waits and every scenario
        worker is ready (within `patience` s, then it goes on: a pool that cannot fill must
        not stop the scenarios from being traced at all)."""
        deadline = time.monotonic() + patience
        pool = self.scenarios.pool
        while time.monotonic() < deadline:
            busy = self.scenarios.gate.load() != (0, 0)
            if not busy and (pool is None or not pool.running or pool.idle() >= pool.size):
                return
            time.sleep(0.2)

    def devices(self, wait: float = DEVICES_WAIT) -> dict:
        """{"torch", "devices"} as a worker sees them, asked once per process (a fresh worker
        imports torch: seconds on a busy machine). DevicesUnknown while the question is still
        out after `wait` seconds, or when it failed (asked again a minute later)."""
        with self._probe_lock:
            if self._probe is not None:
                return self._probe
            failed = self._probe_failed
            if failed is not None and time.monotonic() - failed[0] < DEVICES_RETRY_S:
                raise DevicesUnknown(f"this machine's devices could not be listed: {failed[1]}")
            if not self._probing:
                self._probing = True
                self._probe_failed = None  # asked again: a later request says "still checking"
                self._probe_done.clear()
                threading.Thread(target=self._ask_devices, daemon=True,
                                 name="autograd-lab-devices").start()
        self._probe_done.wait(max(0.0, wait))
        if self._probe is not None:
            return self._probe
        if self._probe_failed is not None:
            raise DevicesUnknown(f"this machine's devices could not be listed: "
                                 f"{self._probe_failed[1]}")
        raise DevicesUnknown("still checking which devices this machine has (a worker is "
                             "starting torch to look): try again in a few seconds",
                             still_checking=True)

    def _ask_devices(self) -> None:
        found, failed = None, (time.monotonic(), "the look ended early")
        try:
            found, failed = probe_devices(), None
        except Exception as exc:  # noqa: BLE001 - a timeout, a worker that cannot start torch
            failed = (time.monotonic(), str(exc).strip()[:300] or type(exc).__name__)
        finally:
            with self._probe_lock:
                self._probe, self._probe_failed, self._probing = found, failed, False
                self._probe_done.set()

    def scenario_trace(self, scenario: Scenario, variant: str | None, options: dict[str, str],
                       device: str) -> tuple[tuple, dict]:
        args = scenario_args(scenario, variant, options)  # OptionError for the caller
        # what runs is what is served: without the CLASS_QUESTION, whose answer would
        # otherwise travel in the Trace's script.source to anyone who asks for the run
        source = scenario.source().encode("utf-8")
        key = (scenario.name, hashlib.sha256(source).hexdigest(), tuple(args), device,
               self.torch_version)
        kept = self._cache.get(key)
        if kept is not None:
            return key, kept
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            kept = self._cache.get(key)  # traced while this request waited for the key
            if kept is None:
                kept = self._shared_scenario(key)
                if kept is not None:
                    self._cache.put(key, kept)
            if kept is not None:
                with self._lock:
                    self._key_locks.pop(key, None)
                return key, kept
            asked, began = time.monotonic(), None
            try:
                with self.scenarios.gate.enter():
                    began = time.monotonic()
                    doc = self.scenarios.run(source.decode("utf-8", errors="replace"),
                                           scenario.path.name, args, device)
            except BaseException as exc:
                with self._lock:
                    self._key_locks.pop(key, None)
                # a run that started and failed in the server (not a device this machine
                # lacks: that is the request's 422, no run)
                if began is not None and not isinstance(exc, DeviceError):
                    self.scenario_meter.ran("ServerError", began - asked,
                                            time.monotonic() - began)
                raise
            self.scenario_meter.ran(outcome_of(doc), began - asked, time.monotonic() - began)
            with self._lock:
                self._key_locks.pop(key, None)
                # a run that failed for a passing reason (a slow moment, a lost worker) is
                # not kept: the next visitor gets a fresh try instead of the same error
                if not (doc.get("error") and doc["error"]["type"] in _PASSING):
                    self._cache.put(key, doc)
                    keep = True
                else:
                    keep = False
            if keep:
                self._keep_shared_scenario(key, doc)
        return key, doc

    def _shared_scenario(self, key: tuple) -> dict | None:
        """The scenario as another web process traced it, where they share a store (the
        shared mode); None if not there, or the store cannot be reached: then it is traced
        here, as on one machine."""
        if self.shared_scenarios is None:
            return None
        try:
            return self.shared_scenarios.kept_scenario_trace(key)
        except Exception:  # noqa: BLE001 - the database is away: scenarios go on without it
            log.warning("the shared store could not be asked for a scenario", exc_info=True)
            return None

    def _keep_shared_scenario(self, key: tuple, doc: dict) -> None:
        if self.shared_scenarios is None:
            return
        try:
            self.shared_scenarios.keep_scenario_trace(key, doc)
        except Exception:  # noqa: BLE001 - kept here at least: the next process traces it
            log.warning("a scenario's Trace could not be kept in the shared store", exc_info=True)
