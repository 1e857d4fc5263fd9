"""Traces for the web app: computed by the runner, scenario traces kept in a small in-memory
cache, drawings of both scenario and stored runs cached too.

The web process is stateless apart from this cache (and the run store), so several can run
side by side. Two requests for the same trace wait for one run instead of starting two. Every
run, scenario or upload, goes through one gate and, when the server keeps one, one pool of
pre-started sandboxed workers.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from app.catalog import Scenario, scenario_args
from app.format import Trace
from app.render import event_graph, render_graph
from app.runner import Policy, Pool, ResourceLimits, probe_devices, trace_in_sandbox

from .gate import Gate
from .settings import Settings

__all__ = ["TraceService", "DeviceError"]


# errors of the machine rather than of the script: worth another try
_PASSING = {"Timeout", "WorkerCrashed", "WorkerFailed", "SandboxFailed", "MemoryLimit",
            "TraceTooLarge"}


class DeviceError(ValueError):
    """The requested device is not on this machine (422, errors.py)."""


class TraceService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._cache: OrderedDict[tuple, dict] = OrderedDict()
        self._renders: OrderedDict[tuple, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}
        # one gate for scenario traces and uploaded runs: both take a worker
        self.gate = Gate(settings.max_workers, settings.queue_size)
        # graphviz runs in the server's own processes: as many at once as there are cores,
        # a few waiting, the rest told to come back (Busy), whoever asks for how many drawings
        self.render_gate = Gate(settings.max_workers, settings.queue_size)
        self._probe: dict | None = None
        self.pool: Pool | None = None
        self.policy = Policy(limits=ResourceLimits(run_memory_mb=settings.run_memory_mb))

    def start(self) -> None:
        """Start the pool of ready workers (pool_size 0: each run starts a fresh worker)."""
        if self.settings.pool_size and self.pool is None:
            self.pool = Pool(self.settings.pool_size, policy=self.policy).start()

    def stop(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None

    def _run(self, source: str, name: str, args: list[str], device: str) -> Trace:
        """One run through the gate (Busy when every worker and queue place is taken); a
        device the worker does not have is a DeviceError, whoever asked."""
        with self.gate.enter():
            doc = trace_in_sandbox(source=source, name=name, args=args, device=device,
                                   timeout=self.settings.trace_timeout, pool=self.pool,
                                   policy=None if self.pool else self.policy)
        if doc.get("error") and doc["error"]["type"] == "DeviceUnavailable":
            raise DeviceError(doc["error"]["message"])
        return doc

    def devices(self) -> dict:
        if self._probe is None:
            self._probe = probe_devices()
        return self._probe

    def scenario_trace(self, scenario: Scenario, variant: str | None, options: dict[str, str],
                       device: str) -> tuple[tuple, dict]:
        args = scenario_args(scenario, variant, options)  # OptionError for the caller
        source = scenario.path.read_bytes()
        key = (scenario.name, hashlib.sha256(source).hexdigest(), tuple(args), device)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return key, self._cache[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._cache:
                    return key, self._cache[key]
            try:
                doc = self._run(source.decode("utf-8", errors="replace"), scenario.path.name,
                                args, device)
            except BaseException:
                with self._lock:
                    self._key_locks.pop(key, None)
                raise
            with self._lock:
                self._key_locks.pop(key, None)
                # a run that failed for a passing reason (a slow moment, a lost worker) is
                # not kept: the next visitor gets a fresh try instead of the same error
                if not (doc.get("error") and doc["error"]["type"] in _PASSING):
                    self._cache[key] = doc
                    while len(self._cache) > self.settings.cache_size:
                        self._cache.popitem(last=False)
        return key, doc

    def run_source(self, source: str, name: str, device: str) -> Trace:
        """Trace submitted code (Busy, DeviceError)."""
        return self._run(source, name, [], device)

    def drawing(self, key: tuple, doc: dict, event: int | None, fmt: str) -> bytes:
        """The graph of one event as svg, png or dot (RenderError, EventNotFound, Busy)."""
        rkey = (key, event, fmt)
        with self._lock:
            if rkey in self._renders:
                return self._renders[rkey]
        graph = event_graph(doc, event)
        with self.render_gate.enter():
            data = render_graph(graph, fmt)
        with self._lock:
            self._renders[rkey] = data
            while len(self._renders) > self.settings.cache_size * 2:
                self._renders.popitem(last=False)
        return data

