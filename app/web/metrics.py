"""What this web process has done, for Prometheus (`GET /metrics`, off unless the `metrics`
setting is on; routers/metrics.py serves it behind the token).

`Metrics` holds one `CollectorRegistry` per app, not the client library's global one: a
process that makes several apps (the tests do) would otherwise register each name twice, and
two apps' counts would mix. The services never see the registry: each is given the narrow
object it records through (`RunMeter` for a lane's runs, `DrawingMeter` for drawings), and the
gauges that only mirror a count kept elsewhere (class followers, the database pool) read it
through a callable when scraped, so nothing is counted twice.

Names follow Prometheus's conventions: an `autograd_lab_` prefix, the unit last (`_seconds`),
`_total` on counters (the client library adds it). Labels have few values: a run's outcome is
its error's kind when the server names it (Timeout, MemoryLimit, ...), and `ScriptError` for
any exception the script raised itself, whose class name is the script's to choose.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "DrawingMeter", "Metrics", "RunMeter", "outcome_of"]

CONTENT_TYPE = CONTENT_TYPE_LATEST  # the text format that generate_latest writes

# the kinds of error the server itself names (app/runner/explain.py, app/trace, the queues):
# each a label value of its own; any other error type is an exception the script raised
SERVER_NAMED = frozenset({
    "Timeout", "MemoryLimit", "ResourceLimit", "MemoryError", "WorkerCrashed", "WorkerFailed",
    "SandboxFailed", "TraceTooLarge", "ServerBusy", "ServerError", "UploadHostLost",
    "DeviceUnavailable", "SyntaxError", "NoGraph", "ScriptExit"})

# a run waits from nothing (a free worker) to minutes (a full line behind long scripts), and
# runs from a tenth of a second (a forked worker, a small script) to the upload limit (20 s)
# or a scenario's (60 s)
WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
RUN_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)


def outcome_of(doc: dict | None, stopped: bool = False) -> str:
    """A run's outcome as a label: `done`, `stopped`, a kind the server names, or
    `ScriptError` (the script raised an exception of its own)."""
    error = (doc or {}).get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    if stopped or kind == "Stopped":
        return "stopped"
    if not kind:
        return "done"
    return kind if kind in SERVER_NAMED else "ScriptError"


@dataclass(frozen=True)
class RunMeter:
    """What one lane's runs tell the metrics, once each run has ended. Without instruments
    (`RunMeter(lane)`), it records nothing: a CLI run has no endpoint (an upload host has its
    own, upload_host.py)."""
    lane: str
    runs: Counter | None = None
    waits: Histogram | None = None
    times: Histogram | None = None

    def ran(self, outcome: str, waited_s: float | None, ran_s: float | None) -> None:
        """One run ended with `outcome` (outcome_of), after waiting `waited_s` for a worker
        and running `ran_s`; None for a run stopped before it started (it never ran)."""
        if self.runs is None:
            return
        self.runs.labels(self.lane, outcome).inc()
        if waited_s is not None:
            self.waits.labels(self.lane).observe(max(0.0, waited_s))
        if ran_s is not None:
            self.times.labels(self.lane).observe(max(0.0, ran_s))


@dataclass(frozen=True)
class DrawingMeter:
    """What the drawings cache tells the metrics: `drawn` (graphviz made one), `failed`
    (graphviz could not), `cached` (a request answered from the cache, a kept refusal
    included), `timeout` (a request that stopped waiting for the same drawing being made for
    another, answered 503). A request that waited for another's drawing and got it is not
    counted again: it cost no graphviz of its own."""
    drawings: Counter | None = None

    def drew(self, result: str) -> None:
        if self.drawings is not None:
            self.drawings.labels(result).inc()


class _Reading(Collector):
    """Gauges read when scraped from a callable (the pool's stats), so that a number kept by
    its owner is never copied and never goes stale."""

    def __init__(self, read: Callable[[], Iterable]) -> None:
        self._read = read

    def collect(self):
        return list(self._read())

    def describe(self):
        return []  # the families depend on what is read (none before the pool opens)


class Metrics:
    """One app's registry and instruments."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._runs = Counter("autograd_lab_runs", "Runs ended, by lane (scenario, upload) "
                             "and outcome (done, stopped, ScriptError, Timeout, MemoryLimit, "
                             "...)", ["lane", "outcome"], registry=r)
        self._waits = Histogram("autograd_lab_run_queue_wait_seconds", "Seconds a run waited "
                                "for a worker, by lane", ["lane"], buckets=WAIT_BUCKETS,
                                registry=r)
        self._times = Histogram("autograd_lab_run_duration_seconds", "Seconds a run took in "
                                "its worker, by lane", ["lane"], buckets=RUN_BUCKETS, registry=r)
        self._refusals = Counter("autograd_lab_refusals", "Requests refused with 429 or 503, "
                                 "by status and reason (the answer's code: too_many, busy, "
                                 "store_unavailable, sandbox_checking, devices_checking, ...)",
                                 ["status", "reason"], registry=r)
        self._drawings = Counter("autograd_lab_drawings", "Drawings made by graphviz (drawn, "
                                 "failed) and requests answered from the cache (cached) or "
                                 "given up waiting for another's (timeout)", ["result"],
                                 registry=r)

    def runs(self, lane: str) -> RunMeter:
        return RunMeter(lane, self._runs, self._waits, self._times)

    def drawings(self) -> DrawingMeter:
        return DrawingMeter(self._drawings)

    def refused(self, status: int, reason: str) -> None:
        """A request answered 429 or 503 (http/error_handler.py); other statuses are not
        counted here."""
        if status in (429, 503):
            self._refusals.labels(str(status), reason).inc()

    def watch_streams(self, streams: Callable[[], int], followers: Callable[[], int]) -> None:
        """The classes' event streams open in this process, and those of them following a
        teacher (classes/classroom.py: ProcessStreams), read when scraped."""
        Gauge("autograd_lab_class_event_streams", "Class event streams open in this process "
              "(teachers' and students' pages)", registry=self.registry).set_function(streams)
        Gauge("autograd_lab_class_followers", "Class event streams of pages following a "
              "teacher in this process", registry=self.registry).set_function(followers)

    def watch_starts(self, counts: Callable[[], dict[str, int]]) -> None:
        """Workers that ended before their READY line (app/runner/start_failures.py), by
        stage, read when scraped: the machine's failures, never a script's."""
        self.registry.register(_Reading(lambda: [_start_failures(counts())]))

    def watch_upload_host(self, slots: int, running: Callable[[], int]) -> None:
        """An upload host's own metrics (upload_host.py): its slots, and its runs going on,
        read when scraped."""
        Gauge("autograd_lab_upload_host_slots", "Runs this upload host may run at once",
              registry=self.registry).set(slots)
        Gauge("autograd_lab_upload_host_runs", "Runs this upload host is running now",
              registry=self.registry).set_function(running)

    def watch_pool(self, stats: Callable[[], dict | None]) -> None:
        """The shared mode's database pool (store/database.py: Database.pool_stats), read
        when scraped; nothing before the pool opens."""
        self.registry.register(_Reading(lambda: _pool_families(stats())))

    def exposition(self) -> bytes:
        """Every metric in Prometheus's text format."""
        return generate_latest(self.registry)


def _start_failures(counts: dict[str, int]) -> CounterMetricFamily:
    family = CounterMetricFamily(
        "autograd_lab_worker_start_failures", "Sandboxed workers that ended before they were "
        "ready, by stage: pool (a pre-started one; another is started), run (a run's; the run "
        "started another), gave_up (a run told SandboxFailed after its tries)", labels=["stage"])
    for stage, count in counts.items():
        family.add_metric([stage], count)
    return family


def _pool_families(stats: dict | None) -> list:
    if stats is None:
        return []
    families = []
    for name, text in (("size", "Connections the pool holds open"),
                       ("max", "Connections the pool may open"),
                       ("in_use", "Connections lent out"),
                       ("waiting", "Requests waiting for a connection")):
        family = GaugeMetricFamily(f"autograd_lab_db_pool_{name}", text)
        family.add_metric([], stats[name])
        families.append(family)
    errors = CounterMetricFamily("autograd_lab_db_pool_request_errors", "Requests for a "
                                 "connection that failed or timed out")
    errors.add_metric([], stats["errors"])
    families.append(errors)
    return families
